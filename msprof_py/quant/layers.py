"""The int8 Linear layer the AMCT-like flow converts ``nn.Linear`` into.

``Int8Linear`` holds its weight as int8 on the device (symmetric, per output channel or per
tensor), the activation scale of its input (per tensor, symmetric, from calibration) and the
bias as int32 in the accumulator's units. Its forward runs two device kernels:

1. ``AscendQuant`` (vector): ``x_q = int8(clamp(round_half_even(x / s_x), -128, 127))``;
2. ``QuantBatchMatmulV3`` (cube, int8, int32 accumulation) through
   :func:`msprof_py.adapter.torch_npu.quant.npu_quant_matmul`:
   ``y = dequant(x_q @ w_q^T + round(b / (s_x s_w)))`` with the dequant scale ``s_x s_w`` per
   output channel, written as float16 (bfloat16 for bfloat16 inputs). A float32 input gets a
   float16 product and one Cast back to float32.
"""

from __future__ import annotations

import torch
from torch import nn

from msprof_py.adapter.custom_ops import device_call, host, launch_kernel, numerics_none, state
from msprof_py.adapter.custom_ops import wrap as _wrap
from msprof_py.device.costmodel import vector_cost

__all__ = ["Int8Linear", "quantize_activation"]

QMIN, QMAX = -128, 127


def quantize_activation(x: torch.Tensor, scale: float) -> torch.Tensor:
    """int8 ``clamp(round_half_even(x / scale), -128, 127)`` of an npu tensor: one
    ``AscendQuant`` vector kernel (read x, write one byte per element)."""
    if x.device.type != "npu":
        raise RuntimeError(f"quantize_activation: x must be an npu tensor, got {x.device}")
    with device_call("msprof_py.quant.quantize_activation"):
        if numerics_none():
            q = torch.empty(x.shape, dtype=torch.int8, device="meta")
        else:
            q = torch.round(host(x).float() / scale).clamp(QMIN, QMAX).to(torch.int8)
        out = _wrap(q.contiguous(), "AscendQuant")
        nbytes = x.numel() * x.element_size() + out.numel()
        cost = vector_cost(
            state().npu.spec,
            elements=x.numel(),
            dtype=str(x.dtype).removeprefix("torch."),
            bytes_moved=nbytes,
            ops_per_element=3,  # multiply by 1/s, round, cast with saturation
        )
        launch_kernel("AscendQuant", "msprof_py.quant.quantize_activation", cost, [x], [out])
    return out


class Int8Linear(nn.Module):
    """An ``nn.Linear`` run as int8 on the device's cube (see the module docstring).

    Built by :func:`msprof_py.quant.convert` from a float Linear, its activation scale and its
    weight scales; ``weight`` (out x in, int8), ``deq_scale`` (float32, out) and
    ``deq_words`` (int64, out: :func:`npu_trans_quant_param` of ``deq_scale``) are buffers.
    """

    def __init__(
        self,
        weight_q: torch.Tensor,
        weight_scale: torch.Tensor,
        act_scale: float,
        bias: torch.Tensor | None,
    ) -> None:
        super().__init__()
        self.in_features = int(weight_q.shape[1])
        self.out_features = int(weight_q.shape[0])
        self.act_scale = float(act_scale)
        deq = (weight_scale.double() * self.act_scale).float()
        self.register_buffer("weight", weight_q.to(torch.int8))
        self.register_buffer("weight_scale", weight_scale.float())
        self.register_buffer("deq_scale", deq)
        self.register_buffer("deq_words", _words(deq))
        if bias is None:
            self.register_buffer("bias", None)
        else:
            b = torch.round(bias.double() / deq.double()).clamp(-(2**31), 2**31 - 1)
            self.register_buffer("bias", b.to(torch.int32))

    @classmethod
    def from_float(
        cls, linear: nn.Linear, act_scale: float, *, per_channel: bool = True
    ) -> Int8Linear:
        """Quantise ``linear``'s weight symmetrically (per output channel or per tensor)."""
        w = linear.weight.detach().float().cpu()
        amax = w.abs().amax(dim=1) if per_channel else w.abs().amax().expand(w.shape[0])
        scale = torch.where(amax > 0, amax / QMAX, torch.ones_like(amax))
        q = torch.round(w / scale.unsqueeze(1)).clamp(QMIN, QMAX).to(torch.int8)
        bias = None if linear.bias is None else linear.bias.detach().float().cpu()
        layer = cls(q, scale, act_scale, bias)
        return layer.to(linear.weight.device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """int8 quantise ``x``, int8 matmul with int32 accumulation, dequantised output."""
        from msprof_py.adapter.torch_npu.quant import npu_quant_matmul

        lead = x.shape[:-1]
        xq = quantize_activation(x, self.act_scale).reshape(-1, self.in_features)
        if x.dtype == torch.bfloat16:
            out_dtype, scale = torch.bfloat16, self.deq_scale
        else:
            out_dtype, scale = torch.float16, self.deq_words
        y = npu_quant_matmul(
            xq, self.weight.t(), scale, bias=self.bias, output_dtype=out_dtype
        ).reshape(*lead, self.out_features)
        return y if y.dtype == x.dtype else y.to(x.dtype)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"act_scale={self.act_scale:.3g}"
        )


def _words(deq: torch.Tensor) -> torch.Tensor:
    """The int64 quant words of ``deq`` (as npu_trans_quant_param packs them), on the host."""
    from msprof_py.adapter.torch_npu.quant import encode_words

    return encode_words(deq)
