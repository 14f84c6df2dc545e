"""Ops with no NPU kernel that run on the host: PyTorch's CPU quantized kernels.

``torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)`` turns Linear
layers into ``DynamicQuantizedLinear`` modules whose packed int8 weights are a CPU-only
``ScriptObject``: ``.to("npu")`` moves the rest of the model and leaves them on the host, and
torch_npu has no kernel for ``quantized::linear_dynamic`` (on real hardware the call fails).
msprof-py runs such ops where they can run, honestly costed, as a CPU fallback would:

1. every npu tensor argument is copied to the host (a blocking device-to-host copy from
   pageable memory, after the stream's earlier work),
2. the op runs on the CPU (PyTorch's own quantized kernel, so the values are the CPU model's):
   measured time with ``host_time="measured"``, else its multiply-adds at
   :data:`HOST_INT8_OPS_PER_S`, as a host span named ``<op> (host)``,
3. each tensor result is copied back to the device (a blocking host-to-device copy).

Every ``quantized::`` op an npu tensor reaches goes through here. A warning says so once per op.
"""

from __future__ import annotations

import math
import os
import sys
import time
import warnings
from typing import Any

import torch

from msprof_py.adapter.errors import NumericsNoneError
from msprof_py.adapter.runtime import AdapterState
from msprof_py.adapter.tensors import adopt, host_view, is_npu_device, storage_format
from msprof_py.device import CopyKind

__all__ = ["HOST_INT8_OPS_PER_S", "is_host_only", "run"]

#: [U] host CPU rate for PyTorch's dynamic-quantized Linear (fbgemm/onednn int8 GEMM with its
#: per-call activation quantisation), multiply-adds x 2 per second: a few server cores
HOST_INT8_OPS_PER_S = 200e9
#: [U] fixed host cost of one quantized op call (dispatch, quantising the activation)
HOST_CALL_NS = 20_000

_WARNED: set[str] = set()


def is_host_only(schema_name: str) -> bool:
    """True for ops with no NPU kernel that msprof-py runs on the host (``quantized::*``)."""
    return schema_name.startswith("quantized::")


def _flops(args: tuple, result: Any) -> float:
    """2 x multiply-adds of a linear op: output elements x the input's last axis."""
    first = next((a for a in args if isinstance(a, torch.Tensor)), None)
    out = result if isinstance(result, torch.Tensor) else None
    if first is None or out is None or first.dim() == 0:
        return 0.0
    return 2.0 * out.numel() * first.shape[-1]


def _meta_result(name: str, args: tuple) -> torch.Tensor:
    """The result's shape on shapes only: linear ops from their packed weight."""
    x = args[0] if args and isinstance(args[0], torch.Tensor) else None
    packed = args[1] if len(args) > 1 else None
    if x is not None and "linear" in name and hasattr(packed, "unpack"):
        weight = packed.unpack()[0]
        return torch.empty((*x.shape[:-1], weight.shape[0]), dtype=torch.float32, device="meta")
    raise NumericsNoneError(name)


def _warn_once(name: str) -> None:
    if name in _WARNED:
        return
    _WARNED.add(name)
    warnings.warn(
        f"{name} has no NPU kernel (torch_npu cannot run it): msprof-py runs it on the host "
        "with copies to and from the device; use torch_npu.npu_quant_matmul or "
        "msprof_py.quant.quantize/convert for int8 on the device",
        RuntimeWarning,
        stacklevel=_caller_level(),
    )


def _caller_level() -> int:
    """The stack level of the first frame outside torch and msprof-py (the user's call)."""
    skip = (os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(__file__)))
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(skip):
        frame, level = frame.f_back, level + 1
    return level


def run(
    state: AdapterState, op: torch._ops.OpOverload, name: str, args: tuple, kwargs: dict
) -> Any:
    """Run ``op`` on the host: copy npu inputs down, compute on the CPU, copy results up."""
    from msprof_py.adapter.backend import transdata  # backend imports this module

    _warn_once(name)
    engine = state.npu.engine

    def down(v: Any) -> Any:
        if isinstance(v, torch.Tensor) and is_npu_device(v.device):
            if storage_format(v) is not None:
                transdata(state, v, "ND", retag=False)
            engine.submit_memcpy(
                state.stream,
                CopyKind.D2H,
                v.numel() * v.element_size(),
                pinned=False,
                name=f"{name} (D2H)",
            )
            return host_view(v)
        if isinstance(v, (list, tuple)):
            return type(v)(down(x) for x in v)
        if isinstance(v, torch.device) and v.type == "npu":
            return torch.device("cpu")
        return v

    host_args = tuple(down(a) for a in args)
    host_kwargs = {k: down(v) for k, v in kwargs.items()}
    start = time.perf_counter_ns()
    result = _meta_result(name, host_args) if state.meta else op(*host_args, **host_kwargs)
    if state.measured:
        spent = time.perf_counter_ns() - start
    else:
        spent = HOST_CALL_NS + math.ceil(_flops(host_args, result) / HOST_INT8_OPS_PER_S * 1e9)
    engine.advance_host(spent, f"{name} (host)")
    return _up(state, name, result)


def _up(state: AdapterState, name: str, result: Any) -> Any:
    if isinstance(result, torch.Tensor):
        if result.is_quantized:  # a quantized result stays on the host, as its module's weights
            return result
        state.npu.engine.submit_memcpy(
            state.stream,
            CopyKind.H2D,
            result.numel() * result.element_size(),
            pinned=False,
            name=f"{name} (H2D)",
        )
        return adopt(result.contiguous(), state, name)
    if isinstance(result, (list, tuple)):
        return type(result)(_up(state, name, r) for r in result)
    return result
