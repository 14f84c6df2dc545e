"""Errors the npu device raises in torch's own style."""

from __future__ import annotations

import sys
from typing import NoReturn

import torch

from msprof_py.device import NpuOutOfMemoryError


class NpuOutOfMemory(torch.OutOfMemoryError):
    """The simulated NPU ran out of memory (a ``torch.OutOfMemoryError``).

    ``detail`` is the device-level error with the requested, allocated, reserved and free bytes.
    """

    def __init__(self, detail: NpuOutOfMemoryError) -> None:
        super().__init__(str(detail))
        self.detail = detail


def raise_oom(exc: NpuOutOfMemoryError) -> NoReturn:
    """Re-raise a device OOM as torch's out-of-memory error."""
    raise NpuOutOfMemory(exc) from None


class NumericsNoneError(RuntimeError):
    """An operation needed tensor values while the device runs with ``numerics="none"``.

    Raised for reads the shapes-only policy gives no value (see
    :mod:`msprof_py.adapter.shapes_only`) and for ops whose output shape depends on values.
    """

    def __init__(self, operation: str) -> None:
        where = _caller_outside_the_stack()
        super().__init__(
            f"{operation}{f' at {where}' if where else ''} needs tensor values, but the npu "
            "device runs with numerics='none' (shapes only); run with numerics='cpu' to "
            "compute values"
        )
        self.operation = operation
        self.location = where


def _caller_outside_the_stack() -> str:
    """``file:line`` of the innermost frame outside torch and msprof_py (the user's read)."""
    frame = sys._getframe(2)
    while frame is not None:
        path = frame.f_code.co_filename.replace("\\", "/")
        if "/torch/" not in path and "/msprof_py/" not in path and not path.startswith("<frozen"):
            return f"{path}:{frame.f_lineno}"
        frame = frame.f_back
    return ""


_SDPA = "torch.nn.functional.scaled_dot_product_attention (or torch_npu.npu_fusion_attention)"
_CONV = "torch.nn.functional.conv1d/conv2d/conv3d"
#: ops without a CPU kernel (CUDA-only fused kernels ...) -> what to call on npu instead
ALTERNATIVES = {
    "_thnn_fused_lstm_cell": "torch.nn.LSTM or torch.nn.LSTMCell",
    "_thnn_fused_lstm_cell_backward_impl": "torch.nn.LSTM or torch.nn.LSTMCell",
    "_thnn_fused_gru_cell": "torch.nn.GRU or torch.nn.GRUCell",
    "_thnn_fused_gru_cell_backward": "torch.nn.GRU or torch.nn.GRUCell",
    "_cudnn_rnn": "torch.nn.LSTM, torch.nn.GRU or torch.nn.RNN",
    "miopen_rnn": "torch.nn.LSTM, torch.nn.GRU or torch.nn.RNN",
    "_fused_dropout": "torch.nn.functional.dropout",
    "_scaled_dot_product_flash_attention": _SDPA,
    "_scaled_dot_product_efficient_attention": _SDPA,
    "_scaled_dot_product_cudnn_attention": _SDPA,
    "_flash_attention_forward": _SDPA,
    "_efficient_attention_forward": _SDPA,
    "cudnn_convolution": _CONV,
    "cudnn_convolution_transpose": "torch.nn.functional.conv_transpose2d",
    "cudnn_batch_norm": "torch.nn.functional.batch_norm",
    "_cudnn_ctc_loss": "torch.nn.functional.ctc_loss",
}


def unsupported_op(name: str) -> NotImplementedError:
    """The one-line error for an op the npu cannot run: ``name`` (``aten::_fused_dropout``)
    has no CPU kernel, and the simulated npu runs every op through its CPU kernel."""
    base = name.split("::", 1)[-1].split(".", 1)[0]
    message = (
        f"{name} is not supported on the npu device: the simulated npu runs ops through their "
        "CPU kernels and this op has none"
    )
    alternative = ALTERNATIVES.get(base)
    if alternative is not None:
        message += f"; use {alternative} instead"
    return NotImplementedError(message)
