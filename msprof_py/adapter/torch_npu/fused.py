"""torch_npu's fused operators: FlashAttention, RMSNorm, rotary embedding and SwiGLU.

Each API has torch_npu's signature and computes its result on the host views of its npu inputs
with the plain PyTorch reference math (``numerics="none"``: on meta tensors), wraps the results
as npu tensors and launches ONE fused kernel costed from the shapes (device facts section 6: one
launch, one roofline over the union of the work, only external inputs and outputs as bytes).
Autograd goes through a ``torch.autograd.Function`` whose backward recomputes the reference on
host copies with ``torch.autograd`` and launches one grad kernel.

Precision: fp16/bf16 inputs are computed in fp32 and the results cast back to the input dtype,
as the NPU kernels accumulate in fp32; fp32 (and fp64) inputs are computed in their own dtype,
so the results equal the reference expressions below up to float rounding of the op order
(allclose with rtol=1e-5, atol=1e-6 in fp32).

``npu_fusion_attention`` (``FlashAttentionScore``, a MIX_AIC kernel) never materialises the
B*N*Sq*Skv score matrix in device memory: the host computes it, only the outputs take device
memory, and the kernel's bytes are q, k, v, out, the softmax statistics and the masks it reads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from msprof_py.adapter.custom_ops import device_call, host, launch_kernel, state, wrap
from msprof_py.adapter.opcost import dtype_name
from msprof_py.device import attention as device_attention
from msprof_py.device.attention import STAT_WIDTH, flash_attention_cost
from msprof_py.device.costmodel import KernelCost, vector_cost
from msprof_py.device.spec import DeviceSpec

__all__ = ["npu_fusion_attention", "npu_rms_norm", "npu_rotary_mul", "npu_swiglu"]

_MAX_TOKENS = 2147483647
#: last dim of softmax_max / softmax_sum (torch_npu's SOFTMAXMAX_LAST_DIMSHAPE)
_STAT_WIDTH = STAT_WIDTH
_HALF = (torch.float16, torch.bfloat16)


# ---- shared helpers ----------------------------------------------------------------------


def _check_npu(name: str, **tensors: torch.Tensor | None) -> None:
    for arg, t in tensors.items():
        if t is not None and (not isinstance(t, torch.Tensor) or t.device.type != "npu"):
            where = t.device if isinstance(t, torch.Tensor) else type(t).__name__
            raise RuntimeError(f"{name}: {arg} must be an npu tensor, got {where}")


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in _HALF else dtype


def _up(t: torch.Tensor) -> torch.Tensor:
    return t.to(_compute_dtype(t.dtype))


def _fresh(t: torch.Tensor, keep: Sequence[torch.Tensor] = ()) -> torch.Tensor:
    """A contiguous tensor owning exactly its storage, not aliasing any of ``keep``."""
    t = t.contiguous()
    storage = t.untyped_storage()
    aliased = any(storage.data_ptr() == k.untyped_storage().data_ptr() for k in keep)
    if aliased or t.storage_offset() or storage.nbytes() != t.numel() * t.element_size():
        t = t.clone()
    return t


def _nbytes(t: torch.Tensor | None) -> int:
    return 0 if t is None else t.numel() * t.element_size()


def _wrap_all(results: Sequence[torch.Tensor], keep: Sequence[torch.Tensor], tag: str) -> list:
    return [wrap(_fresh(r, keep), tag) for r in results]


# ---- npu_fusion_attention ----------------------------------------------------------------


@dataclass(frozen=True)
class _Attention:
    """Static description of one npu_fusion_attention call (shapes and attributes)."""

    layout: str
    head_num: int
    kv_heads: int
    batch: int
    sq: int
    skv: int
    d: int
    dv: int
    scale: float
    keep_prob: float
    pre_tokens: int
    next_tokens: int
    sparse_mode: int
    seed: int
    has_mask: bool = False
    #: TND only: per-sequence (q start, q end, kv start, kv end)
    segments: tuple[tuple[int, int, int, int], ...] = ()

    # -- layouts --

    def to_bnsd(self, t: torch.Tensor, heads: int) -> torch.Tensor:
        layout = self.layout
        if layout == "BNSD":
            return t
        if layout == "BSND":
            return t.transpose(1, 2)
        if layout == "BSH":
            b, s, h = t.shape
            return t.reshape(b, s, heads, h // heads).transpose(1, 2)
        s, b, h = t.shape  # SBH
        return t.reshape(s, b, heads, h // heads).permute(1, 2, 0, 3)

    def from_bnsd(self, t: torch.Tensor) -> torch.Tensor:
        layout = self.layout
        b, n, s, d = t.shape
        if layout == "BNSD":
            return t
        if layout == "BSND":
            return t.transpose(1, 2)
        if layout == "BSH":
            return t.transpose(1, 2).reshape(b, s, n * d)
        return t.permute(2, 0, 1, 3).reshape(s, b, n * d)  # SBH

    # -- masks --

    def band(self, sq: int, skv: int) -> tuple[int, int] | None:
        """Allowed key offsets ``[lo, hi]`` relative to each query row (None: no band)."""
        mode, diag = self.sparse_mode, skv - sq
        if mode == 2:  # leftUpCausal
            return (-_MAX_TOKENS, 0)
        if mode == 3:  # rightDownCausal
            return (-_MAX_TOKENS, diag)
        if mode == 4:  # band, anchored at the bottom-right corner
            return (diag - self.pre_tokens, diag + self.next_tokens)
        if mode == 0 and (self.pre_tokens < _MAX_TOKENS or self.next_tokens < _MAX_TOKENS):
            return (-self.pre_tokens, self.next_tokens)
        return None

    def skip_band(self, sq: int, skv: int) -> tuple[int, int] | None:
        """The band outside which the kernel masks (and skips) scores; None: no band."""
        if self.sparse_mode == 1 or (self.sparse_mode == 0 and not self.has_mask):
            return None  # allMask, or defaultMask without atten_mask (pre/next tokens ignored)
        return self.band(sq, skv)

    def mask(
        self, user: torch.Tensor | None, sq: int, skv: int, device: torch.device
    ) -> torch.Tensor | None:
        """The boolean mask (True = masked) the kernel applies to one [.., sq, skv] block."""
        band = self.skip_band(sq, skv)
        if self.sparse_mode in (0, 1):  # the user's full mask, narrowed by the band
            if user is None or band is None:
                return user
            return user | _band_mask(sq, skv, band, device)
        assert band is not None  # modes 2-4: the compressed mask's contents are not read
        return _band_mask(sq, skv, band, device)

    def density(self) -> float:
        """Fraction of the scores the kernel computes (causal / band modes skip the rest)."""
        blocks = self.segments or ((0, self.sq, 0, self.skv),)
        total = kept = 0
        for q0, q1, k0, k1 in blocks:
            sq, skv = q1 - q0, k1 - k0
            band = self.skip_band(sq, skv)
            total += sq * skv
            kept += sq * skv if band is None else _band_count(sq, skv, band)
        return kept / total if total else 1.0

    # -- the reference math --

    def compute(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        pse: torch.Tensor | None,
        atten_mask: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(attention_out in the input layout, softmax_max, softmax_sum) on host tensors."""
        if self.layout == "TND":
            return self._compute_tnd(q, k, v, pse, atten_mask)
        qb = self.to_bnsd(q, self.head_num)
        kb = self.to_bnsd(k, self.kv_heads)
        vb = self.to_bnsd(v, self.kv_heads)
        mask = self.mask(atten_mask, self.sq, self.skv, q.device)
        drop = self._drop_mask((self.batch, self.head_num, self.sq, self.skv), 0, q.device)
        out, row_max, row_sum = _attend(qb, kb, vb, pse, mask, self.scale, self.keep_prob, drop)
        out = self.from_bnsd(out.to(q.dtype))
        return out, _stat(row_max), _stat(row_sum)

    def _compute_tnd(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        pse: torch.Tensor | None,
        atten_mask: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        outs, maxes, sums = [], [], []
        for index, (q0, q1, k0, k1) in enumerate(self.segments):
            sq, skv = q1 - q0, k1 - k0
            qb = q[q0:q1].transpose(0, 1).unsqueeze(0)
            kb = k[k0:k1].transpose(0, 1).unsqueeze(0)
            vb = v[k0:k1].transpose(0, 1).unsqueeze(0)
            user = None if atten_mask is None else atten_mask[..., :sq, :skv]
            mask = self.mask(user, sq, skv, q.device)
            bias = None if pse is None else _batch_row(pse, index)[..., :sq, :skv]
            drop = self._drop_mask((1, self.head_num, sq, skv), index, q.device)
            out, row_max, row_sum = _attend(
                qb, kb, vb, bias, mask, self.scale, self.keep_prob, drop
            )
            outs.append(out[0].transpose(0, 1).to(q.dtype))
            maxes.append(_stat(row_max)[0].transpose(0, 1))
            sums.append(_stat(row_sum)[0].transpose(0, 1))
        return torch.cat(outs), torch.cat(maxes), torch.cat(sums)

    def _drop_mask(
        self, shape: tuple[int, ...], index: int, device: torch.device
    ) -> torch.Tensor | None:
        """The dropout keep-mask, regenerated identically from ``seed`` in the backward."""
        if self.keep_prob >= 1.0:
            return None
        if self.keep_prob <= 0.0:
            return torch.zeros(shape, dtype=torch.bool, device=device)
        if device.type == "meta":
            return torch.empty(shape, dtype=torch.bool, device=device)
        gen = torch.Generator().manual_seed(self.seed + index)
        return torch.rand(shape, generator=gen) < self.keep_prob

    # -- costs --

    def _cost_dims(self) -> tuple[int, int, int]:
        """(batch * heads, Sq, Skv); TND: one batch of T query rows with the mean key length."""
        if not self.segments:
            return self.batch * self.head_num, self.sq, self.skv
        rows = sum(q1 - q0 for q0, q1, _, _ in self.segments)
        pairs = sum((q1 - q0) * (k1 - k0) for q0, q1, k0, k1 in self.segments)
        return self.head_num, rows, -(-pairs // max(rows, 1))

    def cost(self, dtype: str, nbytes: int, *, backward: bool) -> KernelCost:
        """FlashAttentionScore(Grad): a MIX_AIC kernel, cube matmuls plus the online softmax
        (:func:`msprof_py.device.attention.flash_attention_cost`)."""
        batch, sq, skv = self._cost_dims()
        return flash_attention_cost(
            state().npu.spec,
            batch=batch,
            sq=sq,
            skv=skv,
            d=self.d,
            dv=self.dv,
            dtype=dtype,
            nbytes=nbytes,
            density=self.density(),
            backward=backward,
            kv_share=self.kv_heads / self.head_num,
        )


def bnsd_attention(
    batch: int,
    heads: int,
    kv_heads: int,
    sq: int,
    skv: int,
    d: int,
    dv: int,
    scale: float,
    keep_prob: float = 1.0,
    causal: bool = False,
    has_mask: bool = False,
) -> _Attention:
    """The FlashAttentionScore description of a [B, N, S, D] attention (for other callers
    that launch the fused kernel, such as ``scaled_dot_product_attention``); ``causal`` is
    top-left aligned (sparse mode 2). Its ``cost(dtype, nbytes, backward=...)`` is the
    kernel's cost."""
    return _Attention(
        layout="BNSD",
        head_num=heads,
        kv_heads=kv_heads,
        batch=batch,
        sq=sq,
        skv=skv,
        d=d,
        dv=dv,
        scale=scale,
        keep_prob=keep_prob,
        pre_tokens=_MAX_TOKENS,
        next_tokens=_MAX_TOKENS,
        sparse_mode=2 if causal else 0,
        seed=0,
        has_mask=has_mask,
    )


def _batch_row(t: torch.Tensor, index: int) -> torch.Tensor:
    """Row ``index`` of a [B, ...] tensor (a batch of 1 broadcasts), keeping the batch axis."""
    row = index if t.shape[0] > 1 else 0
    return t[row : row + 1]


def _band_mask(sq: int, skv: int, band: tuple[int, int], device: torch.device) -> torch.Tensor:
    """True where key j lies outside ``[i + lo, i + hi]`` for query row i."""
    lo, hi = band
    rows = torch.arange(sq, device=device).unsqueeze(1)
    cols = torch.arange(skv, device=device).unsqueeze(0)
    offset = cols - rows
    return (offset < lo) | (offset > hi)


def _band_count(sq: int, skv: int, band: tuple[int, int]) -> int:
    """How many (i, j) pairs of an sq x skv block lie inside the band."""
    lo, hi = band
    rows = torch.arange(sq, dtype=torch.int64)
    first = (rows + max(lo, -skv - sq)).clamp(min=0)
    last = (rows + min(hi, skv + sq)).clamp(max=skv - 1)
    return int((last - first + 1).clamp(min=0).sum())


def _attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    pse: torch.Tensor | None,
    mask: torch.Tensor | None,
    scale: float,
    keep_prob: float,
    drop: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """softmax(scale * (q k^T + pse), masked) v on [B, N, S, D] tensors, in fp32 for halves.

    Returns (out, row max, row sum of exp(s - max)); a fully masked row gives zeros.
    """
    n, n_kv = q.shape[1], k.shape[1]
    if n != n_kv:  # grouped-query attention: each kv head serves n / n_kv query heads
        k = k.repeat_interleave(n // n_kv, dim=1)
        v = v.repeat_interleave(n // n_kv, dim=1)
    scores = torch.matmul(_up(q), _up(k).transpose(-1, -2))
    if pse is not None:
        scores = scores + _up(pse)
    scores = scores * scale
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    row_max = scores.amax(dim=-1, keepdim=True)
    safe_max = torch.where(torch.isinf(row_max), torch.zeros_like(row_max), row_max)
    exp = torch.exp(scores - safe_max.detach())
    row_sum = exp.sum(dim=-1, keepdim=True)
    probs = exp / torch.where(row_sum == 0, torch.ones_like(row_sum), row_sum)
    if drop is not None:
        probs = probs * drop / keep_prob if keep_prob > 0 else probs * drop
    out = torch.matmul(probs, _up(v))
    return out, row_max.detach(), row_sum.detach()


def _stat(t: torch.Tensor) -> torch.Tensor:
    """A [..., 1] row statistic as torch_npu's fp32 [..., 8] (the value repeated)."""
    return t.float().expand(*t.shape[:-1], _STAT_WIDTH).contiguous()


def require_a2(spec: DeviceSpec, api: str) -> None:
    """Raise as torch_npu does when a fused A2+ kernel is called on an earlier chip (910A)."""
    if not spec.a2_class:
        raise RuntimeError(
            f"{api} is supported only on Atlas A2/A3 training products (Ascend910B, "
            f"Ascend910_93); this device is {spec.soc_version}"
        )


def _describe(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    head_num: int,
    input_layout: str,
    pse: torch.Tensor | None,
    atten_mask: torch.Tensor | None,
    scale: float,
    keep_prob: float,
    pre_tockens: int,
    next_tockens: int,
    actual_seq_qlen: Sequence[int] | None,
    actual_seq_kvlen: Sequence[int] | None,
    sparse_mode: int,
) -> tuple[_Attention, int]:
    """Validate the arguments; return the call's description and ``numels``."""
    require_a2(state().npu.spec, "npu_fusion_attention")
    if query.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise TypeError(
            f"npu_fusion_attention supports float16, bfloat16 and float32, not {query.dtype}"
        )
    if key.dtype != query.dtype or value.dtype != query.dtype:
        raise TypeError("npu_fusion_attention: query, key and value must have the same dtype")
    layout = str(input_layout).upper()
    if layout not in ("BSH", "SBH", "BSND", "BNSD", "TND"):
        raise ValueError(
            f"The input_layout should be BSH/SBH/BNSD/BSND/TND(case-insensitive), but got "
            f"{input_layout}"
        )
    if head_num <= 0:
        raise ValueError(f"head_num must > 0, but got {head_num}")
    if not 0.0 <= keep_prob <= 1.0:
        raise ValueError(f"The keep_prob value must be in range of [0, 1], but got {keep_prob}")
    if sparse_mode not in (0, 1, 2, 3, 4):
        raise NotImplementedError(
            f"npu_fusion_attention: sparse_mode {sparse_mode} (prefix / varlen outer-cut modes) "
            "is not simulated; supported: 0 default, 1 allMask, 2 leftUpCausal, "
            "3 rightDownCausal, 4 band"
        )
    want = 3 if layout in ("BSH", "SBH", "TND") else 4
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.dim() != want:
            raise ValueError(
                f"{name} must be {want}-dimensional for layout {layout}, got {t.dim()}"
            )
    segments: tuple[tuple[int, int, int, int], ...] = ()
    if layout in ("BSH", "SBH"):
        b_axis, s_axis = (0, 1) if layout == "BSH" else (1, 0)
        batch, sq, skv = query.shape[b_axis], query.shape[s_axis], key.shape[s_axis]
        if query.shape[2] % head_num:
            raise ValueError(
                f"H={query.shape[2]} of query is not a multiple of head_num={head_num}"
            )
        d = query.shape[2] // head_num
        if key.shape[2] % d:
            raise ValueError(f"H={key.shape[2]} of key is not a multiple of D={d}")
        kv_heads = key.shape[2] // d
        dv = value.shape[2] // kv_heads
    elif layout == "TND":
        if actual_seq_qlen is None or actual_seq_kvlen is None:
            raise ValueError("layout TND needs actual_seq_qlen and actual_seq_kvlen")
        ends_q = [int(x) for x in actual_seq_qlen]
        ends_kv = [int(x) for x in actual_seq_kvlen]
        if len(ends_q) != len(ends_kv) or not ends_q:
            raise ValueError("actual_seq_qlen and actual_seq_kvlen must have the same length >= 1")
        if ends_q[-1] != query.shape[0] or ends_kv[-1] != key.shape[0]:
            raise ValueError("the last actual_seq_qlen/kvlen must equal T of query/key")
        starts_q, starts_kv = [0, *ends_q[:-1]], [0, *ends_kv[:-1]]
        segments = tuple(zip(starts_q, ends_q, starts_kv, ends_kv, strict=True))
        batch = len(segments)
        sq = max(q1 - q0 for q0, q1, _, _ in segments)
        skv = max(k1 - k0 for _, _, k0, k1 in segments)
        d, kv_heads, dv = query.shape[2], key.shape[1], value.shape[2]
    else:
        n_axis, s_axis = (1, 2) if layout == "BNSD" else (2, 1)
        batch, sq, skv = query.shape[0], query.shape[s_axis], key.shape[s_axis]
        d, kv_heads, dv = query.shape[3], key.shape[n_axis], value.shape[3]
        if query.shape[n_axis] != head_num:
            raise ValueError(f"query has {query.shape[n_axis]} heads, head_num is {head_num}")
    if layout == "TND" and query.shape[1] != head_num:
        raise ValueError(f"query has {query.shape[1]} heads, head_num is {head_num}")
    if layout not in ("BSH", "SBH") and key.shape[-1] != d:
        raise ValueError(f"key head dim {key.shape[-1]} differs from query head dim {d}")
    if key.shape[:-1] != value.shape[:-1] and layout not in ("BSH", "SBH"):
        raise ValueError(f"key {tuple(key.shape)} and value {tuple(value.shape)} do not match")
    if kv_heads <= 0 or head_num % kv_heads:
        raise ValueError(f"head_num={head_num} is not a multiple of the key/value heads {kv_heads}")
    if pse is not None and layout != "TND" and pse.shape[-2] not in (1, sq):
        raise NotImplementedError("npu_fusion_attention: compressed (alibi) pse is not simulated")
    if layout == "TND":
        numels = head_num * sum((q1 - q0) * (k1 - k0) for q0, q1, k0, k1 in segments)
    else:
        numels = batch * head_num * sq * skv
    seed = 0
    if 0.0 < keep_prob < 1.0:  # torch_npu draws (seed, offset) from the device generator
        seed = int(torch.randint(0, 2**62, (1,)).item())
    spec = _Attention(
        layout=layout,
        head_num=int(head_num),
        kv_heads=int(kv_heads),
        batch=int(batch),
        sq=int(sq),
        skv=int(skv),
        d=int(d),
        dv=int(dv),
        scale=float(scale),
        keep_prob=float(keep_prob),
        pre_tokens=int(pre_tockens),
        next_tokens=int(next_tockens),
        sparse_mode=int(sparse_mode),
        seed=seed,
        has_mask=atten_mask is not None,
        segments=segments,
    )
    return spec, numels


def drop_mask_cost(keep_prob: float, numels: int) -> KernelCost | None:
    """The DropOutGenMaskV3 kernel generating the bit mask of ``numels`` scores (None
    without dropout); the mask's bytes are ``cost.bytes``."""
    return device_attention.drop_mask_cost(state().npu.spec, keep_prob, numels)


def _launch_drop_mask(spec: _Attention, numels: int, query: torch.Tensor) -> int:
    """With dropout, torch_npu first generates the bit mask (DropOutGenMaskV3): its bytes."""
    cost = drop_mask_cost(spec.keep_prob, numels)
    if cost is None:
        return 0
    launch_kernel("DropOutGenMaskV3", "npu_dropout_gen_mask", cost, [query], [])
    return cost.bytes


class _FusionAttention(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        spec: _Attention,
        numels: int,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        pse: torch.Tensor | None,
        atten_mask: torch.Tensor | None,
    ) -> tuple[torch.Tensor, ...]:
        inputs = [t for t in (query, key, value, pse, atten_mask) if t is not None]
        with device_call("torch_npu.npu_fusion_attention"):
            views = [None if t is None else host(t) for t in (query, key, value, pse, atten_mask)]
            out_h, max_h, sum_h = spec.compute(*views)  # type: ignore[arg-type]
            empty = torch.empty(0, dtype=query.dtype, device=out_h.device)
            out, softmax_max, softmax_sum, softmax_out = _wrap_all(
                (out_h, max_h, sum_h, empty),
                [v for v in views if v is not None],
                "npu_fusion_attention",
            )
            mask_bytes = _launch_drop_mask(spec, numels, query)
            outputs = [out, softmax_max, softmax_sum]
            nbytes = sum(_nbytes(t) for t in (*inputs, *outputs)) + mask_bytes
            cost = spec.cost(dtype_name(query.dtype), nbytes, backward=False)
            launch_kernel("FlashAttentionScore", "npu_fusion_attention", cost, inputs, outputs)
        ctx.spec = spec
        ctx.numels = numels
        ctx.save_for_backward(query, key, value, pse, atten_mask, out, softmax_max, softmax_sum)
        ctx.mark_non_differentiable(softmax_max, softmax_sum, softmax_out)
        ctx.set_materialize_grads(False)  # no ZerosLike kernels for the statistics' gradients
        return out, softmax_max, softmax_sum, softmax_out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor, *_: Any) -> tuple[Any, ...]:  # type: ignore[override]
        query, key, value, pse, atten_mask, out, softmax_max, softmax_sum = ctx.saved_tensors
        spec: _Attention = ctx.spec
        if grad_out is None:
            return (None,) * 7
        needs = ctx.needs_input_grad[2:6]
        with device_call("torch_npu.npu_fusion_attention_grad"):
            leaves = [
                None
                if t is None
                else host(t).detach().requires_grad_(need and t.is_floating_point())
                for t, need in zip((query, key, value, pse), needs, strict=True)
            ]
            wanted = [leaf for leaf in leaves if leaf is not None and leaf.requires_grad]
            grads_h: list[torch.Tensor | None] = [None] * 4
            if wanted:
                with torch.enable_grad():
                    out_h, _, _ = spec.compute(
                        *leaves, None if atten_mask is None else host(atten_mask)
                    )  # type: ignore[arg-type]
                found = torch.autograd.grad(out_h, wanted, host(grad_out), allow_unused=True)
                it = iter(found)
                for i, leaf in enumerate(leaves):
                    if leaf is not None and leaf.requires_grad:
                        g = next(it)
                        grads_h[i] = torch.zeros_like(leaf) if g is None else g
            # the kernel always writes dq, dk, dv (and dpse when pse is given)
            views = [host(t) for t in (query, key, value, pse) if t is not None]
            grads = [
                None
                if g is None
                else wrap(_fresh(g.to(t.dtype), views), "npu_fusion_attention_grad")
                for g, t in zip(grads_h, (query, key, value, pse), strict=True)
            ]
            mask_bytes = _launch_drop_mask(spec, ctx.numels, query)
            inputs = [
                t
                for t in (
                    query,
                    key,
                    value,
                    grad_out,
                    pse,
                    atten_mask,
                    softmax_max,
                    softmax_sum,
                    out,
                )
                if t is not None
            ]
            written = [g for g in grads if g is not None]
            nbytes = sum(_nbytes(t) for t in inputs) + mask_bytes
            nbytes += sum(_nbytes(t) for t in (query, key, value, pse) if t is not None)
            cost = spec.cost(dtype_name(query.dtype), nbytes, backward=True)
            launch_kernel(
                "FlashAttentionScoreGrad", "npu_fusion_attention_grad", cost, inputs, written
            )
        return (None, None, *grads, None)


def npu_fusion_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    head_num: int,
    input_layout: str,
    pse: torch.Tensor | None = None,
    padding_mask: torch.Tensor | None = None,
    atten_mask: torch.Tensor | None = None,
    scale: float = 1.0,
    keep_prob: float = 1.0,
    pre_tockens: int = 2147483647,
    next_tockens: int = 2147483647,
    inner_precise: int = 0,
    prefix: Sequence[int] | None = None,
    actual_seq_qlen: Sequence[int] | None = None,
    actual_seq_kvlen: Sequence[int] | None = None,
    sparse_mode: int = 0,
    gen_mask_parallel: bool = True,
    sync: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int, int, int]:
    """FlashAttention: ``Dropout(Softmax(Mask(scale * (pse + q k^T), atten_mask)), keep_prob) v``.

    Returns torch_npu's tuple ``(attention_out, softmax_max, softmax_sum, softmax_out, seed,
    offset, numels)``: ``attention_out`` has the query's layout (with value's head dim),
    ``softmax_max``/``softmax_sum`` are fp32 ``[B, N, Sq, 8]`` (TND: ``[T, N, 8]``) row max and
    row sum of ``exp(s - max)``, ``softmax_out`` is empty (reserved), ``seed``/``offset`` identify
    the dropout mask (0 without dropout) and ``numels`` is ``B*N*Sq*Skv``.

    Layouts BSH, SBH, BSND, BNSD and TND (with cumulative ``actual_seq_qlen``/``kvlen``); key and
    value may have fewer heads than the query (GQA). ``atten_mask`` is boolean, True = masked,
    broadcastable to [B, N, Sq, Skv] ([Sq, Skv], [B, 1, Sq, Skv] ...). sparse_mode 0 applies
    atten_mask plus the ``pre_tockens``/``next_tockens`` band (both ignored without a mask),
    1 the mask alone, 2 / 3 a top-left / bottom-right aligned causal mask and 4 a band anchored
    at the bottom-right corner (for 2-4 the compressed 2048x2048 mask's contents are not read).
    A fully masked row gives zeros. ``padding_mask``, ``prefix``, ``inner_precise``,
    ``gen_mask_parallel`` and ``sync`` are accepted and ignored, as the kernel ignores them.

    Launches ONE MIX_AIC kernel ``FlashAttentionScore`` (plus ``DropOutGenMaskV3`` when
    ``0 < keep_prob < 1``); the backward launches one ``FlashAttentionScoreGrad``.
    """
    _check_npu("npu_fusion_attention", query=query, key=key, value=value, pse=pse)
    _check_npu("npu_fusion_attention", atten_mask=atten_mask)
    if atten_mask is not None and atten_mask.dtype not in (torch.bool, torch.uint8):
        raise TypeError(f"atten_mask must be bool or uint8, got {atten_mask.dtype}")
    spec, numels = _describe(
        query,
        key,
        value,
        head_num,
        input_layout,
        pse,
        atten_mask,
        scale,
        keep_prob,
        pre_tockens,
        next_tockens,
        actual_seq_qlen,
        actual_seq_kvlen,
        sparse_mode,
    )
    mask = atten_mask
    if mask is not None and mask.dtype == torch.uint8:
        mask = mask.bool()
    out, softmax_max, softmax_sum, softmax_out = _FusionAttention.apply(
        spec, numels, query, key, value, pse, mask
    )
    return out, softmax_max, softmax_sum, softmax_out, spec.seed, 0, numels


# ---- vector fused ops --------------------------------------------------------------------


@dataclass(frozen=True)
class _VectorOp:
    """A fused vector kernel: its names, host reference and vector work per element."""

    name: str
    op_type: str
    grad_op_type: str
    reference: Callable[..., tuple[torch.Tensor, ...]]
    ops_per_element: float
    grad_ops_per_element: float
    #: how many leading outputs are differentiable (the rest, e.g. rstd, are not)
    differentiable: int = 1


def _vector_launch(
    op_type: str,
    name: str,
    ops: float,
    inputs: Sequence[torch.Tensor],
    outputs: Sequence[torch.Tensor],
) -> None:
    tensors = (*inputs, *outputs)
    elements = max(t.numel() for t in tensors)
    nbytes = sum(_nbytes(t) for t in tensors)
    cost = vector_cost(
        state().npu.spec,
        elements=elements,
        dtype=dtype_name(inputs[0].dtype),
        bytes_moved=nbytes,
        ops_per_element=ops,
    )
    launch_kernel(op_type, name, cost, inputs, outputs)


class _FusedVector(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, op: _VectorOp, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:  # type: ignore[override]
        with device_call(op.name):
            views = [host(t) for t in inputs]
            results = op.reference(*views)
            outputs = _wrap_all(results, views, op.name)
            _vector_launch(op.op_type, op.name, op.ops_per_element, inputs, outputs)
        ctx.op = op
        ctx.save_for_backward(*inputs)
        if len(outputs) > op.differentiable:
            ctx.mark_non_differentiable(*outputs[op.differentiable :])
        ctx.set_materialize_grads(False)  # no ZerosLike kernels for unused outputs
        return tuple(outputs)

    @staticmethod
    def backward(ctx: Any, *grad_outputs: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        op: _VectorOp = ctx.op
        inputs = ctx.saved_tensors
        needs = ctx.needs_input_grad[1:]
        used = [(i, g) for i, g in enumerate(grad_outputs[: op.differentiable]) if g is not None]
        if not used:
            return (None,) * (len(inputs) + 1)
        with device_call(op.name + "_grad"):
            leaves = [
                host(t).detach().requires_grad_(need and t.is_floating_point())
                for t, need in zip(inputs, needs, strict=True)
            ]
            wanted = [leaf for leaf in leaves if leaf.requires_grad]
            grads: list[torch.Tensor | None] = [None] * len(inputs)
            if wanted:
                with torch.enable_grad():
                    results = op.reference(*leaves)
                found = torch.autograd.grad(
                    [results[i] for i, _ in used],
                    wanted,
                    [host(g) for _, g in used],
                    allow_unused=True,
                )
                views = [host(t) for t in inputs]
                it = iter(found)
                for i, leaf in enumerate(leaves):
                    if leaf.requires_grad:
                        g = next(it)
                        g = torch.zeros_like(leaf) if g is None else g.to(leaf.dtype)
                        grads[i] = wrap(_fresh(g, views), f"{op.name}_backward")
            written = [g for g in grads if g is not None]
            _vector_launch(
                op.grad_op_type,
                f"{op.name}_backward",
                op.grad_ops_per_element,
                [*(g for _, g in used), *inputs],
                written,
            )
        return (None, *grads)


def _rms_norm_reference(eps: float) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    def reference(x: torch.Tensor, gamma: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        dims = tuple(range(x.dim() - gamma.dim(), x.dim()))
        xf = _up(x)
        rstd = torch.rsqrt(xf.pow(2).mean(dim=dims, keepdim=True) + eps)
        y = (xf * rstd * gamma.to(xf.dtype)).to(x.dtype)
        return y, rstd.float()

    return reference


def npu_rms_norm(
    x: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm over the trailing ``gamma.dim()`` axes: ``(y, rstd)``.

    ``rstd = rsqrt(mean(x^2) + epsilon)`` in fp32 with the normalised axes kept as size 1;
    ``y = x * rstd * gamma`` in ``x``'s dtype. One ``RmsNorm`` vector kernel (``RmsNormGrad``
    in the backward, which gives x and gamma gradients).
    """
    _check_npu("npu_rms_norm", x=x, gamma=gamma)
    if gamma.dim() > x.dim() or tuple(x.shape[x.dim() - gamma.dim() :]) != tuple(gamma.shape):
        raise ValueError(
            f"npu_rms_norm: gamma {tuple(gamma.shape)} must match the trailing axes of x "
            f"{tuple(x.shape)}"
        )
    op = _VectorOp(
        "npu_rms_norm", "RmsNorm", "RmsNormGrad", _rms_norm_reference(float(epsilon)), 5, 9, 1
    )
    y, rstd = _FusedVector.apply(op, x, gamma)
    return y, rstd


def _rotary_reference(mode: str) -> Callable[..., tuple[torch.Tensor]]:
    def reference(x: torch.Tensor, r1: torch.Tensor, r2: torch.Tensor) -> tuple[torch.Tensor]:
        xf, c, s = _up(x), _up(r1), _up(r2)
        if mode == "half":
            x1, x2 = xf.chunk(2, dim=-1)
            rotated = torch.cat((-x2, x1), dim=-1)
        else:  # interleave
            x1, x2 = xf[..., 0::2], xf[..., 1::2]
            rotated = torch.stack((-x2, x1), dim=-1).flatten(-2)
        return ((xf * c + rotated * s).to(x.dtype),)

    return reference


def npu_rotary_mul(
    input: torch.Tensor,
    r1: torch.Tensor,
    r2: torch.Tensor,
    rotary_mode: str = "half",
) -> torch.Tensor:
    """Rotary position embedding: ``x * r1 + rotate(x) * r2`` (torch_npu's definition).

    ``rotary_mode="half"``: ``rotate(x) = cat(-x2, x1)`` of the two halves of the last axis;
    ``"interleave"``: the even/odd elements are the pairs. ``r1`` (cos) and ``r2`` (sin)
    broadcast against ``input``. One ``RotaryMul`` vector kernel (``RotaryMulGrad`` in the
    backward, which gives input, r1 and r2 gradients).
    """
    _check_npu("npu_rotary_mul", input=input, r1=r1, r2=r2)
    if rotary_mode not in ("half", "interleave"):
        raise ValueError(f"rotary_mode must be 'half' or 'interleave', got {rotary_mode!r}")
    if input.shape[-1] % 2:
        raise ValueError(f"npu_rotary_mul: the last axis ({input.shape[-1]}) must be even")
    op = _VectorOp(
        "npu_rotary_mul", "RotaryMul", "RotaryMulGrad", _rotary_reference(rotary_mode), 4, 8
    )
    (out,) = _FusedVector.apply(op, input, r1, r2)
    return out


def _swiglu_reference(dim: int) -> Callable[..., tuple[torch.Tensor]]:
    def reference(x: torch.Tensor) -> tuple[torch.Tensor]:
        a, b = _up(x).chunk(2, dim=dim)
        return ((F.silu(a) * b).to(x.dtype),)

    return reference


def npu_swiglu(input: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """SwiGLU: ``silu(a) * b`` where ``a, b`` are the two halves of ``input`` along ``dim``.

    One ``SwiGlu`` vector kernel (``SwiGluGrad`` in the backward).
    """
    _check_npu("npu_swiglu", input=input)
    if input.shape[dim] % 2:
        raise ValueError(f"npu_swiglu: axis {dim} ({input.shape[dim]}) must be even")
    op = _VectorOp("npu_swiglu", "SwiGlu", "SwiGluGrad", _swiglu_reference(dim), 8, 12)
    (out,) = _FusedVector.apply(op, input)
    return out
