"""What device work one ATen op becomes: engine (cube, vector, AI CPU), FLOPs, bytes, op type.

The backend hands each op's host tensors (inputs and outputs, with their storage formats) to
:func:`op_tasks`, which returns the kernels to launch. Matmuls and convolutions run on the cube
(convolutions as implicit GEMMs; their backward as two kernels, for the input and the weight
gradient), ops an AI Core would not run go to the AI CPU (float64/complex data, int64
arithmetic, nonzero, unique, sort ...), everything else is a vector kernel over its traffic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from msprof_py.device import costmodel
from msprof_py.device.costmodel import KernelCost
from msprof_py.device.dtypes import ITEMSIZE
from msprof_py.device.formats import storage_bytes
from msprof_py.device.spec import DeviceSpec, SpecError

#: CANN op types for the ATen ops people see most (others: CamelCase of the ATen name).
OP_TYPES = {
    "mm": "MatMul",
    "addmm": "MatMul",
    "bmm": "BatchMatMul",
    "baddbmm": "BatchMatMul",
    "addbmm": "BatchMatMul",
    "convolution_overrideable": "Conv2D",
    "convolution": "Conv2D",
    "relu": "Relu",
    "threshold_backward": "ReluGrad",
    "native_batch_norm": "BNTrainingUpdate",
    "_native_batch_norm_legit": "BNTrainingUpdate",
    "_native_batch_norm_legit_no_training": "BNInfer",
    "native_batch_norm_backward": "BNTrainingUpdateGrad",
    "native_layer_norm": "LayerNorm",
    "native_layer_norm_backward": "LayerNormGrad",
    "_softmax": "SoftmaxV2",
    "_softmax_backward_data": "SoftmaxGrad",
    "_log_softmax": "LogSoftmaxV2",
    "_log_softmax_backward_data": "LogSoftmaxGrad",
    "gelu": "Gelu",
    "gelu_backward": "GeluGrad",
    "sum": "ReduceSum",
    "mean": "ReduceMean",
    "max_pool2d_with_indices": "MaxPoolWithArgmaxV1",
    "max_pool2d_with_indices_backward": "MaxPoolGradWithArgmaxV1",
    "avg_pool2d": "AvgPool",
    "_adaptive_avg_pool2d": "AdaptiveAvgPool2d",
    "nll_loss_forward": "NLLLoss",
    "nll_loss_backward": "NLLLossGrad",
    "fill": "Fill",
    "zero": "ZerosLike",
    "copy": "ViewCopy",
    "_to_copy": "Cast",
    "embedding": "GatherV2",
    "index_select": "GatherV2",
    "embedding_dense_backward": "EmbeddingDenseGrad",
    "_fused_adamw": "ApplyAdamW",
    "_fused_adam": "ApplyAdam",
    "_fused_sgd": "ApplyMomentum",
    "native_dropout": "DropOutDoMask",
    "native_dropout_backward": "DropOutDoMask",
    "where": "SelectV2",
    "nonzero": "NonZero",
    "sort": "Sort",
}

#: Vector instructions per element for ops heavier than one add (others: 1).
VECTOR_OPS_PER_ELEMENT = {
    "exp": 4,
    "log": 4,
    "tanh": 6,
    "sigmoid": 6,
    "gelu": 8,
    "gelu_backward": 10,
    "silu": 6,
    "erf": 8,
    "pow": 4,
    "sqrt": 2,
    "rsqrt": 2,
    "div": 2,
    "_softmax": 5,
    "_log_softmax": 6,
    "_softmax_backward_data": 3,
    "_log_softmax_backward_data": 4,
    "native_layer_norm": 8,
    "native_layer_norm_backward": 10,
    "native_batch_norm": 6,
    "_native_batch_norm_legit": 6,
    "native_batch_norm_backward": 8,
    "native_dropout": 3,
    "normal": 8,
    "uniform": 6,
    "bernoulli": 6,
    "_fused_adamw": 14,
    "_fused_adam": 14,
    "_fused_sgd": 4,
    "addcdiv": 3,
    "addcmul": 2,
    "lerp": 3,
    "_foreach_addcdiv": 3,
    "_foreach_addcmul": 2,
    "_foreach_sqrt": 2,
    "_foreach_div": 2,
    "_foreach_lerp": 3,
    "cumsum": 2,
}

#: Ops an AI Core does not run: they fall back to the AI CPU.
AICPU_OPS = frozenset(
    {
        "nonzero",
        "unique_dim",
        "_unique2",
        "_unique",
        "unique_consecutive",
        "sort",
        "argsort",
        "masked_select",
        "randperm",
        "multinomial",
        "bincount",
        "histc",
        "_local_scalar_dense",
        "unique_dim_consecutive",
        "kthvalue",
        "median",
        "nanmedian",
        "mode",
    }
)

_AICPU_DTYPES = frozenset({torch.float64, torch.complex64, torch.complex128})
_ARITHMETIC = frozenset(
    {
        "add",
        "sub",
        "mul",
        "div",
        "remainder",
        "floor_divide",
        "neg",
        "abs",
        "maximum",
        "minimum",
        "clamp",
        "cumsum",
        "sum",
        "prod",
        "bitwise_and",
        "bitwise_or",
        "bitwise_xor",
    }
)


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """What the cost model needs of one tensor."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    fmt: str = "ND"

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def dtype_name(self) -> str:
        return dtype_name(self.dtype)

    @property
    def nbytes(self) -> int:
        """Bytes as stored, padded for private formats."""
        if self.fmt == "ND":
            return self.numel * self.dtype.itemsize
        return storage_bytes(self.shape, self.dtype_name, self.fmt)


@dataclass(frozen=True, slots=True)
class PlannedKernel:
    """One kernel an op launches."""

    op_type: str
    cost: KernelCost


_DTYPE_NAMES: dict[torch.dtype, str] = {}


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float16`` -> ``"float16"``; dtypes the device does not know map to a known dtype
    of the same size (``float8_e4m3fn`` -> ``"int8"``)."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = str(dtype).removeprefix("torch.")
        if name not in ITEMSIZE:
            name = {1: "int8", 2: "int16", 4: "int32", 8: "int64"}.get(dtype.itemsize, "uint8")
        _DTYPE_NAMES[dtype] = name
    return name


def functional_name(base: str) -> str:
    """``"add_"`` -> ``"add"``: in-place variants cost what their functional op costs."""
    return base[:-1] if base.endswith("_") else base


def op_type_of(base: str) -> str:
    """The CANN op type of an ATen op's base name."""
    found = OP_TYPES.get(base)
    if found is None:
        name = functional_name(base)
        found = OP_TYPES.get(name) or "".join(p.capitalize() for p in name.strip("_").split("_"))
        OP_TYPES[base] = found
    return found


def _runs_on_aicpu(base: str, inputs: Sequence[TensorInfo], outputs: Sequence[TensorInfo]) -> bool:
    base = functional_name(base)
    if base in AICPU_OPS:
        return True
    tensors = [*inputs, *outputs]
    if any(t.dtype in _AICPU_DTYPES for t in tensors):
        return True
    return bool(base in _ARITHMETIC and tensors and all(t.dtype == torch.int64 for t in tensors))


def _matmul(
    spec: DeviceSpec, base: str, inputs: Sequence[TensorInfo], outputs: Sequence[TensorInfo]
) -> KernelCost:
    out = outputs[0]
    a, b = (inputs[1], inputs[2]) if base in ("addmm", "baddbmm", "addbmm") else inputs[:2]
    k = a.shape[-1]
    m = a.shape[-2] if len(a.shape) >= 2 else 1
    n = b.shape[-1]
    batch = math.prod(a.shape[:-2]) if len(a.shape) > 2 and base != "addbmm" else 1
    if base == "addbmm":
        batch = a.shape[0]
    epilogue = out.numel if base in ("addmm", "baddbmm", "addbmm") else 0
    nbytes = sum(t.nbytes for t in inputs) + out.nbytes
    return costmodel.matmul_cost(
        spec,
        m,
        n,
        k,
        batch=batch,
        dtype=a.dtype_name,
        out_dtype=out.dtype_name,
        bytes_moved=nbytes,
        vector_elements=epilogue,
    )


def _conv_gemm(
    spec: DeviceSpec, m: int, n: int, k: int, groups: int, dtype: str, nbytes: int
) -> KernelCost:
    return costmodel.matmul_cost(spec, m, n, k, batch=groups, dtype=dtype, bytes_moved=nbytes)


def _conv(
    spec: DeviceSpec, inputs: Sequence[TensorInfo], outputs: Sequence[TensorInfo], groups: int
) -> list[PlannedKernel]:
    x, w, y = inputs[0], inputs[1], outputs[0]
    spatial_out = math.prod(y.shape[2:])
    m = y.shape[0] * spatial_out
    n = w.shape[0] // groups
    k = math.prod(w.shape[1:])
    nbytes = x.nbytes + w.nbytes + y.nbytes
    name = "Conv2D" if len(x.shape) == 4 else f"Conv{len(x.shape) - 2}D"
    return [PlannedKernel(name, _conv_gemm(spec, m, n, k, groups, x.dtype_name, nbytes))]


def _conv_backward(
    spec: DeviceSpec,
    inputs: Sequence[TensorInfo],
    outputs: Sequence[TensorInfo | None],
    groups: int,
) -> list[PlannedKernel]:
    grad_out, x, w = inputs[0], inputs[1], inputs[2]
    dtype = grad_out.dtype_name
    kernels = []
    n_out, c_out = grad_out.shape[0], grad_out.shape[1]
    spatial_out = math.prod(grad_out.shape[2:])
    taps = math.prod(w.shape[2:])
    if outputs[0] is not None:  # grad_input = grad_out (x) weight^T
        m = x.shape[0] * math.prod(x.shape[2:])
        nbytes = grad_out.nbytes + w.nbytes + outputs[0].nbytes
        cost = _conv_gemm(
            spec, m, x.shape[1] // groups, (c_out // groups) * taps, groups, dtype, nbytes
        )
        kernels.append(PlannedKernel("Conv2DBackpropInput", cost))
    if len(outputs) > 1 and outputs[1] is not None:  # grad_weight = grad_out^T (x) input
        nbytes = grad_out.nbytes + x.nbytes + outputs[1].nbytes
        cost = _conv_gemm(
            spec,
            c_out // groups,
            math.prod(w.shape[1:]),
            n_out * spatial_out,
            groups,
            dtype,
            nbytes,
        )
        kernels.append(PlannedKernel("Conv2DBackpropFilter", cost))
    if len(outputs) > 2 and outputs[2] is not None:  # grad_bias: a reduction
        cost = costmodel.vector_cost(
            spec,
            elements=grad_out.numel,
            dtype=dtype,
            bytes_moved=grad_out.nbytes + outputs[2].nbytes,
        )
        kernels.append(PlannedKernel("BiasAddGrad", cost))
    return kernels


#: training batch norm runs as two CANN kernels each way, each reading the activation once:
#: forward BNTrainingReduce (per-channel sum and sum of squares) then BNTrainingUpdate
#: (normalise, scale, shift, running stats); backward BNTrainingUpdateGrad (per-channel
#: sums of dy and dy * x_hat) then BNTrainingReduceGrad (dx)
_BN_TRAINING = frozenset({"native_batch_norm", "_native_batch_norm_legit"})
_BN_BACKWARD = frozenset({"native_batch_norm_backward"})


def _batch_norm(
    spec: DeviceSpec, base: str, inputs: Sequence[TensorInfo], outputs: Sequence[TensorInfo]
) -> list[PlannedKernel]:
    x = inputs[0] if base in _BN_TRAINING else inputs[1]
    act = x.nbytes
    dtype = x.dtype_name
    channels = x.shape[1] if len(x.shape) > 1 else 1
    stats = 2 * channels * 4
    if base in _BN_TRAINING:  # x -> sums; x, sums -> y (+ saved mean / rstd)
        steps = (("BNTrainingReduce", act + stats, 2), ("BNTrainingUpdate", 2 * act, 4))
    else:  # dy, x -> sums; dy, x, sums -> dx
        steps = (
            ("BNTrainingUpdateGrad", 2 * act + stats, 3),
            ("BNTrainingReduceGrad", 3 * act, 4),
        )
    kernels = []
    for op_type, traffic, ops in steps:
        cost = costmodel.vector_cost(
            spec, elements=x.numel, dtype=dtype, bytes_moved=traffic, ops_per_element=ops
        )
        kernels.append(PlannedKernel(op_type, cost))
    return kernels


class UnsupportedDtypeError(RuntimeError):
    """torch_npu rejects this dtype on this chip (bf16 on a 910A / 310P cube)."""


_CUBE_OPS = frozenset(
    {"mm", "bmm", "addmm", "baddbmm", "addbmm", "convolution_overrideable", "convolution"}
    | {"convolution_backward_overrideable", "convolution_backward"}
)


def _check_cube_dtype(spec: DeviceSpec, base: str, inputs: Sequence[TensorInfo]) -> None:
    """Raise as torch_npu does for a cube op in a dtype the chip lacks (bf16 before A2)."""
    if base not in _CUBE_OPS:
        return
    for t in inputs:
        if t.dtype == torch.bfloat16 and "bfloat16" not in spec.cube.fractal:
            raise UnsupportedDtypeError(
                f"{op_type_of(base)}: dtype torch.bfloat16 is not supported on "
                f"{spec.soc_version} (its AI Core has no bf16 cube; use float16)"
            )


def op_tasks(
    spec: DeviceSpec,
    base: str,
    inputs: Sequence[TensorInfo],
    outputs: Sequence[TensorInfo | None],
    groups: int = 1,
    per_list: int = 0,
) -> list[PlannedKernel]:
    """The kernels ATen op ``base`` launches for these inputs and outputs.

    A cube op in bf16 on a chip without a bf16 cube raises :class:`UnsupportedDtypeError`, as
    torch_npu does on a 910A, instead of falling back to the AI CPU. A multi-tensor op on its
    fast route (``per_list``: tensors per list, see :mod:`msprof_py.adapter.foreach`) launches
    one kernel per chunk of its lists.
    """
    if per_list:
        return _foreach(spec, base, inputs, outputs, per_list)
    _check_cube_dtype(spec, base, inputs)
    if base in ("convolution_overrideable", "convolution"):
        return _conv(spec, inputs, [o for o in outputs if o is not None], groups)
    if base in ("convolution_backward_overrideable", "convolution_backward"):
        return _conv_backward(spec, inputs, outputs, groups)
    present = [o for o in outputs if o is not None]
    if (base in _BN_TRAINING or base in _BN_BACKWARD) and inputs and len(inputs[0].shape) >= 2:
        return _batch_norm(spec, base, inputs, present)
    nbytes = sum(t.nbytes for t in inputs) + sum(t.nbytes for t in present)
    elements = max((t.numel for t in (*present, *inputs)), default=0)
    aicpu = _runs_on_aicpu(base, inputs, present)
    flops = None
    if base in ("mm", "bmm", "addmm", "baddbmm", "addbmm") and present:
        try:
            if not aicpu:
                return [PlannedKernel(op_type_of(base), _matmul(spec, base, inputs, present))]
        except SpecError:  # a dtype the cube cannot multiply (int32 ...): AI CPU
            aicpu = True
        if aicpu:  # the AI CPU does the matmul's 2mnk FLOPs
            a = inputs[1] if base in ("addmm", "baddbmm", "addbmm") else inputs[0]
            flops = 2.0 * present[0].numel * (a.shape[-1] if a.shape else 1)
            if base == "addbmm":
                flops *= a.shape[0]
    if aicpu:
        cost = costmodel.aicpu_cost(spec, elements=elements, bytes_moved=nbytes, flops=flops)
        return [PlannedKernel(op_type_of(base), cost)]
    dtype = (present or inputs)[0].dtype_name if (present or inputs) else "float32"
    ops = VECTOR_OPS_PER_ELEMENT.get(functional_name(base), 1)
    cost = costmodel.vector_cost(
        spec, elements=elements, dtype=dtype, bytes_moved=nbytes, ops_per_element=ops
    )
    return [PlannedKernel(op_type_of(base), cost)]


def _foreach(
    spec: DeviceSpec,
    base: str,
    inputs: Sequence[TensorInfo],
    outputs: Sequence[TensorInfo | None],
    count: int,
) -> list[PlannedKernel]:
    """The multi-tensor kernels of foreach op ``base`` over lists of ``count`` tensors:
    ``inputs`` are the lists' tensors list after list (then any scalar tensor), ``outputs``
    one per index (none for an in-place op, which writes its first list)."""
    lists = max(1, len(inputs) // count)
    inplace = base.endswith("_")
    op_type = op_type_of(base)
    ops = VECTOR_OPS_PER_ELEMENT.get(functional_name(base), 1)
    dtype = inputs[0].dtype_name if inputs else "float32"
    per_index = len(outputs) == count
    kernels = []
    for indices in costmodel.foreach_chunks(count, lists, inplace):
        read = [inputs[k * count + i] for k in range(lists) for i in indices]
        if per_index:
            written = [o for o in (outputs[i] for i in indices) if o is not None]
        else:
            written = [inputs[i] for i in indices] if inplace else []
        cost = costmodel.vector_cost(
            spec,
            elements=sum(inputs[i].numel for i in indices),
            dtype=dtype,
            bytes_moved=sum(t.nbytes for t in read) + sum(t.nbytes for t in written),
            ops_per_element=ops,
        )
        kernels.append(PlannedKernel(op_type, cost))
    return kernels
