"""``acl.op``: a few compute ops submitted to the simulated device as kernels.

Each op checks its device buffers, computes the real result with numpy (unless the runtime was
initialised with ``numerics=False``) and launches one costed kernel on the given stream.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from msprof_py.acl import constants as C
from msprof_py.acl._runtime import RUNTIME, AclError
from msprof_py.device import costmodel
from msprof_py.device.costmodel import KernelCost
from msprof_py.device.dtypes import canonical, itemsize

_NUMPY = {
    "float16": np.float16,
    "float32": np.float32,
    "float64": np.float64,
    "int8": np.int8,
    "int32": np.int32,
    "int64": np.int64,
}


def _view(ptr: int, count: int, dtype: str) -> np.ndarray | None:
    """A numpy view of ``count`` elements at device address ``ptr`` (None without numerics)."""
    nbytes = count * itemsize(dtype)
    buffer, offset = RUNTIME.resolve(ptr, nbytes)
    if not buffer.on_device:
        raise AclError(
            C.ACL_ERROR_INVALID_PARAM, f"{ptr:#x} is host memory; ops need device memory"
        )
    if buffer.data is None:
        return None
    if dtype not in _NUMPY:
        raise AclError(C.ACL_ERROR_INVALID_PARAM, f"numerics for {dtype} are not supported")
    return buffer.data[offset : offset + nbytes].view(_NUMPY[dtype])


def _launch(cost: KernelCost, stream: int, name: str, op_type: str, **shapes: object) -> int:
    RUNTIME.npu().engine.submit_kernel(
        RUNTIME.stream(stream), cost, name=name, op_type=op_type, **shapes
    )
    return C.ACL_SUCCESS


def matmul(
    a: int, b: int, c: int, m: int, n: int, k: int, dtype: str = "float16", stream: int = 0
) -> int:
    """C[m, n] = A[m, k] @ B[k, n], row-major, on the cube (``aclnnMatmul``)."""
    dtype = canonical(dtype)
    spec = RUNTIME.npu().spec
    va, vb, vc = _view(a, m * k, dtype), _view(b, k * n, dtype), _view(c, m * n, dtype)
    if va is not None and vb is not None and vc is not None:
        acc = np.float32 if dtype in ("float16", "float32") else np.int64
        product = va.reshape(m, k).astype(acc) @ vb.reshape(k, n).astype(acc)
        vc[:] = product.astype(vc.dtype).reshape(-1)
    cost = costmodel.matmul_cost(spec, m, n, k, dtype=dtype)
    return _launch(
        cost,
        stream,
        "aclnnMatmul",
        "MatMul",
        input_shapes=((m, k), (k, n)),
        input_dtypes=(dtype, dtype),
        input_formats=("ND", "ND"),
        output_shapes=((m, n),),
        output_dtypes=(dtype,),
        output_formats=("ND",),
    )


def _elementwise(
    op_type: str,
    fn: Callable[..., np.ndarray],
    inputs: tuple[int, ...],
    out: int,
    count: int,
    dtype: str,
    stream: int,
    ops_per_element: float = 1.0,
) -> int:
    dtype = canonical(dtype)
    views = [_view(p, count, dtype) for p in inputs]
    result = _view(out, count, dtype)
    if result is not None and all(v is not None for v in views):
        result[:] = fn(*views)
    nbytes = count * itemsize(dtype) * (len(inputs) + 1)
    cost = costmodel.vector_cost(
        RUNTIME.npu().spec,
        elements=count,
        dtype=dtype,
        bytes_moved=nbytes,
        ops_per_element=ops_per_element,
    )
    return _launch(
        cost,
        stream,
        f"aclnn{op_type}",
        op_type,
        input_shapes=((count,),) * len(inputs),
        input_dtypes=(dtype,) * len(inputs),
        output_shapes=((count,),),
        output_dtypes=(dtype,),
    )


def add(a: int, b: int, c: int, count: int, dtype: str = "float16", stream: int = 0) -> int:
    """c = a + b over ``count`` elements on the vector units (``aclnnAdd``)."""
    return _elementwise("Add", np.add, (a, b), c, count, dtype, stream)


def mul(a: int, b: int, c: int, count: int, dtype: str = "float16", stream: int = 0) -> int:
    """c = a * b over ``count`` elements on the vector units (``aclnnMul``)."""
    return _elementwise("Mul", np.multiply, (a, b), c, count, dtype, stream)


def relu(x: int, y: int, count: int, dtype: str = "float16", stream: int = 0) -> int:
    """y = max(x, 0) over ``count`` elements on the vector units (``aclnnRelu``)."""

    def _relu(v: np.ndarray) -> np.ndarray:
        return np.maximum(v, 0)

    return _elementwise("Relu", _relu, (x,), y, count, dtype, stream)
