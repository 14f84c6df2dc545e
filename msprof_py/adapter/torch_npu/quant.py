"""torch_npu's int8 matmul: ``npu_quant_matmul`` and ``npu_trans_quant_param``.

``npu_quant_matmul(x1, x2, scale, *, offset=None, pertoken_scale=None, bias=None,
output_dtype=None)`` multiplies int8 matrices on the cube with int32 accumulation and
dequantises on the way out (FixPipe). The result is computed on the host with exactly this
integer arithmetic, so it can be checked bitwise:

1. ``acc = x1 @ x2`` in int32 (computed exactly and wrapped to int32, as two's complement
   int32 accumulation would give), batch axes broadcast;
2. an int32 ``bias`` is added to ``acc`` in int32;
3. dequant, by the output dtype:

   - ``int8`` / ``float16`` without ``pertoken_scale``: the scale the FixPipe reads is the
     int64 word of :func:`npu_trans_quant_param` (a float32 ``scale`` is converted the same
     way first): ``s = float32(bits & 0xFFFFE000)`` (19 bits: sign, exponent, 10 mantissa
     bits) and, for int8, ``o`` = the 9-bit signed offset in bits 37-45.
     float16: ``out = float16(float32(acc) * s)``; int8:
     ``out = int8(clamp(round_half_even(float32(acc) * s + o), -128, 127))``;
   - ``bfloat16``, or ``float16`` with ``pertoken_scale``: ``y = float32(acc) * float32(scale)``
     (``* pertoken_scale[m]`` per row), then a floating ``bias`` is added
     (``y + float32(bias)``), then cast to the output dtype.

Argument checks follow torch_npu's documented combinations (x1/x2 int8 with 2-6 dims, scale
1-D of 1 or n elements: float32 / int64 / bfloat16, offset float32 only for int8 output,
pertoken_scale float32 of m elements only for float16/bfloat16 output, bias int32 (or a float
dtype where the combination allows it) of shape (n,) or (batch, 1, n)); every violation is one
line. int4 packed in int32 is not modelled.

Device work: one ``QuantBatchMatmulV3`` cube kernel costed by
:func:`msprof_py.device.costmodel.matmul_cost` in int8 (the int8 fractal: twice the fp16 MAC
rate on A2), its HBM bytes the operands, parameters and output as stored; ``pertoken_scale``
adds its per-element multiply as vector work. ``npu_trans_quant_param`` launches one small
``TransQuantParamV2`` vector kernel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from msprof_py.adapter.custom_ops import (
    device_call,
    host,
    launch_kernel,
    numerics_none,
    state,
    wrap,
)
from msprof_py.adapter.opcost import dtype_name
from msprof_py.device.costmodel import KernelCost, bound_of, matmul_cost, vector_cost

__all__ = ["dequant_words", "encode_words", "npu_quant_matmul", "npu_trans_quant_param"]

_OUTPUTS = (torch.int8, torch.float16, torch.bfloat16)
_FLOATS = (torch.float16, torch.bfloat16, torch.float32)
#: bits of a float32 the FixPipe keeps of a dequant scale (sign, exponent, 10 mantissa bits)
_SCALE_MASK = 0xFFFFE000
_FLAG_BIT = 1 << 46
_OFFSET_SHIFT = 37


class QuantArgumentError(RuntimeError):
    """An argument torch_npu's int8 matmul would refuse (one line)."""


def _fail(api: str, message: str) -> None:
    raise QuantArgumentError(f"{api}: {message}")


def _check_npu(api: str, **tensors: torch.Tensor | None) -> None:
    for arg, t in tensors.items():
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            _fail(api, f"{arg} must be a Tensor, got {type(t).__name__}")
        if t.device.type != "npu":
            _fail(api, f"{arg} must be an npu tensor, got {t.device}")


# ---- npu_trans_quant_param ---------------------------------------------------------------


def encode_words(scale: torch.Tensor, offset: torch.Tensor | None = None) -> torch.Tensor:
    """The int64 quant words of float32 ``scale`` (and ``offset``), on host tensors."""
    bits = scale.contiguous().view(torch.int32).to(torch.int64) & _SCALE_MASK
    words = bits | _FLAG_BIT
    if offset is not None:
        o = torch.round(offset.to(torch.float32)).clamp(-256, 255).to(torch.int64)
        words = words | ((o & 0x1FF) << _OFFSET_SHIFT)
    return words


def dequant_words(words: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale as float32, offset as float32) the FixPipe reads from int64 quant words."""
    low = (words & _SCALE_MASK).to(torch.int32)  # values above 2^31 wrap, as the bits do
    scale = low.view(torch.float32)
    raw = (words >> _OFFSET_SHIFT) & 0x1FF
    offset = torch.where(raw >= 256, raw - 512, raw).to(torch.float32)
    return scale, offset


def npu_trans_quant_param(scale: torch.Tensor, offset: torch.Tensor | None = None) -> torch.Tensor:
    """Pack a float32 dequant ``scale`` (and ``offset``) into the int64 words the int8 matmul
    reads: ``(bits(scale) & 0xFFFFE000) | 1 << 46``, and with ``offset`` its value rounded and
    clamped to [-256, 255] as 9 bits at bit 37. ``scale`` is 1-D (t,) or 2-D (1, n); the
    result is 1-D int64 of the same number of elements (``offset`` of 1 element broadcasts).
    """
    api = "npu_trans_quant_param"
    _check_npu(api, scale=scale, offset=offset)
    if scale.dtype != torch.float32:
        _fail(api, f"scale must be float32, got {scale.dtype}")
    if scale.dim() not in (1, 2) or (scale.dim() == 2 and scale.shape[0] != 1):
        _fail(api, f"scale must be 1-D (t,) or 2-D (1, n), got shape {tuple(scale.shape)}")
    t = scale.numel()
    if t == 0:
        _fail(api, "scale must not be empty")
    if offset is not None:
        if offset.dtype != torch.float32:
            _fail(api, f"offset must be float32, got {offset.dtype}")
        if offset.numel() not in (1, t):
            _fail(api, f"offset must have 1 or {t} elements (as scale), got {offset.numel()}")
    with device_call(f"torch_npu.{api}"):
        if numerics_none():
            words = torch.empty(t, dtype=torch.int64, device="meta")
        else:
            off = None if offset is None else host(offset).reshape(-1).expand(t)
            words = encode_words(host(scale).reshape(-1), off)
        out = wrap(words.contiguous(), api)
        inputs = [x for x in (scale, offset) if x is not None]
        nbytes = sum(x.numel() * x.element_size() for x in (*inputs, out))
        cost = vector_cost(
            state().npu.spec, elements=t, dtype="float32", bytes_moved=nbytes, ops_per_element=4
        )
        launch_kernel("TransQuantParamV2", f"torch_npu.{api}", cost, inputs, [out])
    return out


# ---- npu_quant_matmul --------------------------------------------------------------------


@dataclass(frozen=True)
class _QuantMatmul:
    """Checked shapes and the dequant path of one npu_quant_matmul call."""

    batch_shape: tuple[int, ...]
    m: int
    k: int
    n: int
    output_dtype: torch.dtype
    #: the scale is read as quant words (trans_quant_param) rather than as floats
    words: bool

    @property
    def out_shape(self) -> tuple[int, ...]:
        return (*self.batch_shape, self.m, self.n)


def _check_matmul(
    x1: torch.Tensor,
    x2: torch.Tensor,
    scale: torch.Tensor,
    offset: torch.Tensor | None,
    pertoken_scale: torch.Tensor | None,
    bias: torch.Tensor | None,
    output_dtype: torch.dtype | None,
) -> _QuantMatmul:
    api = "npu_quant_matmul"
    _check_npu(
        api, x1=x1, x2=x2, scale=scale, offset=offset, pertoken_scale=pertoken_scale, bias=bias
    )
    for name, t in (("x1", x1), ("x2", x2)):
        if t.dtype == torch.int32:
            _fail(api, f"{name} is int32 (int4 packed 8 per int32): not modelled, use int8")
        if t.dtype != torch.int8:
            _fail(api, f"{name} must be int8, got {t.dtype}")
        if not 2 <= t.dim() <= 6:
            _fail(api, f"{name} must have 2 to 6 dims, got {t.dim()} (shape {tuple(t.shape)})")
    m, k = x1.shape[-2:]
    k2, n = x2.shape[-2:]
    if k != k2:
        _fail(api, f"x1 {tuple(x1.shape)} and x2 {tuple(x2.shape)}: k differs ({k} vs {k2})")
    try:
        batch = tuple(torch.broadcast_shapes(x1.shape[:-2], x2.shape[:-2]))
    except RuntimeError:
        _fail(
            api,
            f"batch axes of x1 {tuple(x1.shape)} and x2 {tuple(x2.shape)} do not broadcast",
        )
    out = torch.int8 if output_dtype is None else output_dtype
    if out not in _OUTPUTS:
        _fail(api, f"output_dtype must be torch.int8, torch.float16 or torch.bfloat16, got {out}")
    if scale.dim() != 1 or scale.numel() not in (1, n):
        _fail(api, f"scale must be 1-D with 1 or n={n} elements, got shape {tuple(scale.shape)}")
    if offset is not None:
        if out != torch.int8:
            _fail(api, f"offset is only allowed with int8 output, not {out}")
        if offset.dtype != torch.float32:
            _fail(api, f"offset must be float32, got {offset.dtype}")
        if offset.dim() != 1 or offset.numel() not in (1, n):
            _fail(api, f"offset must be 1-D with 1 or n={n} elements, got {tuple(offset.shape)}")
    if pertoken_scale is not None:
        if out == torch.int8:
            _fail(api, "pertoken_scale needs float16 or bfloat16 output, not int8")
        if pertoken_scale.dtype != torch.float32:
            _fail(api, f"pertoken_scale must be float32, got {pertoken_scale.dtype}")
        if pertoken_scale.dim() != 1 or pertoken_scale.numel() != m:
            _fail(
                api,
                f"pertoken_scale must be 1-D with m={m} elements, "
                f"got {tuple(pertoken_scale.shape)}",
            )
    # scale and bias dtypes per output (torch_npu's table of supported combinations)
    float_out = out == torch.bfloat16 or pertoken_scale is not None
    if float_out:
        halves = (torch.float32, torch.bfloat16)
        allowed_scale = halves if out == torch.bfloat16 else (torch.float32,)
        allowed_bias = (torch.int32, torch.float32, out)
    else:
        allowed_scale = (torch.int64, torch.float32)
        allowed_bias = (torch.int32,)
    if scale.dtype not in allowed_scale:
        names = " or ".join(str(d).removeprefix("torch.") for d in allowed_scale)
        what = f"{out}" + (" with pertoken_scale" if pertoken_scale is not None else "")
        _fail(api, f"scale must be {names} for {what} output, got {scale.dtype}")
    if bias is not None:
        if bias.dtype not in allowed_bias:
            names = " or ".join(str(d).removeprefix("torch.") for d in dict.fromkeys(allowed_bias))
            _fail(api, f"bias must be {names} for {out} output, got {bias.dtype}")
        shape = tuple(bias.shape)
        batch_size = math.prod(batch)
        three_d = len(batch) == 1 and shape == (batch_size, 1, n)
        if shape != (n,) and not three_d:
            _fail(
                api,
                f"bias must be (n,) = ({n},) or, for a 3-D output, (batch, 1, n) = "
                f"({batch_size}, 1, {n}); got {shape}",
            )
    return _QuantMatmul(batch, m, k, n, out, words=not float_out)


def _int32_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """int8 @ int8 accumulated exactly and wrapped to int32 (two's complement). The sums are
    computed in float64, exact while |sum| < 2^53 (k < 2^39 for int8 products <= 2^14)."""
    exact = torch.matmul(a.to(torch.float64), b.to(torch.float64))
    return exact.to(torch.int64).to(torch.int32)


def _compute(
    plan: _QuantMatmul,
    x1: torch.Tensor,
    x2: torch.Tensor,
    scale: torch.Tensor,
    offset: torch.Tensor | None,
    pertoken_scale: torch.Tensor | None,
    bias: torch.Tensor | None,
) -> torch.Tensor:
    """The result on host tensors (the module docstring's formula)."""
    acc = _int32_matmul(x1, x2)
    if bias is not None and bias.dtype == torch.int32:
        acc = (acc.to(torch.int64) + bias.to(torch.int64)).to(torch.int32)
    accf = acc.to(torch.float32)
    if plan.words:
        words = (
            scale if scale.dtype == torch.int64 else encode_words(scale.to(torch.float32), offset)
        )
        s, o = dequant_words(words)
        y = accf * s
        if plan.output_dtype == torch.float16:
            return y.to(torch.float16)
        return torch.round(y + o).clamp(-128, 127).to(torch.int8)
    y = accf * scale.to(torch.float32)
    if pertoken_scale is not None:
        y = y * pertoken_scale.to(torch.float32).unsqueeze(-1)
    if bias is not None and bias.dtype != torch.int32:
        y = y + bias.to(torch.float32)
    return y.to(plan.output_dtype)


def _nbytes(t: torch.Tensor | None) -> int:
    return 0 if t is None else t.numel() * t.element_size()


def quant_matmul_cost(
    plan: _QuantMatmul, x1: torch.Tensor, x2: torch.Tensor, extra_bytes: int
) -> KernelCost:
    """The QuantBatchMatmulV3 kernel: an int8 GEMM on the cube (a 2-D x2 folds the batch of
    x1 into its rows), bytes = operands + output + ``extra_bytes`` (scales, bias ...)."""
    if x2.dim() == 2:
        batch, m = 1, math.prod(plan.batch_shape) * plan.m
    else:
        batch, m = math.prod(plan.batch_shape), plan.m
    out_bytes = math.prod(plan.out_shape) * torch.empty((), dtype=plan.output_dtype).element_size()
    nbytes = _nbytes(x1) + _nbytes(x2) + out_bytes + extra_bytes
    return matmul_cost(
        state().npu.spec,
        m,
        plan.n,
        plan.k,
        batch=batch,
        dtype="int8",
        out_dtype=dtype_name(plan.output_dtype),
        bytes_moved=nbytes,
        vector_elements=0,
    )


def npu_quant_matmul(
    x1: torch.Tensor,
    x2: torch.Tensor,
    scale: torch.Tensor,
    *,
    offset: torch.Tensor | None = None,
    pertoken_scale: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    output_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Quantised matmul ``dequant(x1 @ x2 + bias)`` of int8 ``x1`` (..., m, k) and ``x2``
    (..., k, n) with int32 accumulation; output int8 (default), float16 or bfloat16.
    The exact arithmetic is in this module's docstring. One ``QuantBatchMatmulV3`` kernel.
    """
    plan = _check_matmul(x1, x2, scale, offset, pertoken_scale, bias, output_dtype)
    params = (scale, offset, pertoken_scale, bias)
    with device_call("torch_npu.npu_quant_matmul"):
        if numerics_none():
            result = torch.empty(plan.out_shape, dtype=plan.output_dtype, device="meta")
        else:
            views = [None if t is None else host(t) for t in params]
            result = _compute(plan, host(x1), host(x2), *views).contiguous()
        out = wrap(result, "npu_quant_matmul")
        cost = quant_matmul_cost(plan, x1, x2, sum(_nbytes(t) for t in params))
        if pertoken_scale is not None:  # the per-row multiply runs on the vector units
            per = vector_cost(
                state().npu.spec,
                elements=out.numel(),
                dtype="float32",
                bytes_moved=0,
                block_dim=cost.block_dim,
            )
            cost = _with_vector(cost, per.vector_ns)
        inputs = [t for t in (x1, x2, *params) if t is not None]
        launch_kernel("QuantBatchMatmulV3", "torch_npu.npu_quant_matmul", cost, inputs, [out])
    return out


def _with_vector(cost: KernelCost, vector_ns: float) -> KernelCost:
    """``cost`` with vector work ``vector_ns`` beside its cube and memory terms."""
    vector = max(cost.vector_ns, vector_ns)
    work = max(cost.cube_ns, vector, cost.memory_ns)
    return replace(
        cost,
        vector_ns=vector,
        duration_ns=cost.sched_ns + round(work),
        bound=bound_of(cost.sched_ns, cost.cube_ns, vector, cost.memory_ns),
    )
