"""SDPA in a compiled graph: one fused-attention node, not the math decomposition.

Eager mode runs ``scaled_dot_product_attention`` as a host op (:mod:`msprof_py.adapter.sdpa`).
While Dynamo / AOTAutograd trace (a dispatch mode is active) that host op would run torch's
decomposition, and the npu has no fused-attention choice, so the graph would hold the math
path (casts, mask building, two ``bmm`` and a softmax). Where eager mode launches ONE
``FlashAttentionScore`` (fp16/bf16 on an A2/A3 chip, :func:`~msprof_py.adapter.sdpa.
uses_flash_kernel`), tracing instead records ``aten._scaled_dot_product_fused_attention_
overrideable`` (the fused-attention op a PrivateUse1 backend provides, as torch_npu maps SDPA
to its fusion-attention op), whose derivative is
``_scaled_dot_product_fused_attention_overrideable_backward``: the compiled forward graph gets
one attention node and the backward one gradient node.

What becomes the fused node (:func:`decision`): 4-D ``[B, N, S, D]`` query / key / value, a
boolean or additive ``attn_mask`` (of the query's dtype) broadcastable as
FlashAttentionScore's ``atten_mask`` is (``[Sq, Skv]``, ``[B|1, N|1, Sq, Skv]``: the two
sequence axes whole; Hugging Face's ``[B, 1, Sq, Skv]`` padding masks, expanded or not),
``is_causal``, ``scale``, ``dropout_p`` (FlashAttentionScore's ``keep_prob = 1 - p``) and
GQA (``enable_gqa`` with fewer key/value heads: ``head_num`` of the query). Misses keep
torch's decomposition and carry the reason on the nodes it creates (FX node meta
``custom[MISS_KEY]``), which ``fusion_result.json`` lists.

Running those nodes on the npu (this module's PrivateUse1 kernels): the forward computes the
CPU's SDPA on the host views with the same arguments (mask, dropout, scale, GQA) and launches
what eager mode launches for that call (:func:`~msprof_py.adapter.sdpa.plan_sdpa`:
``FlashAttentionScore`` costed with the mask read, after ``DropOutGenMaskV3`` with dropout);
the backward recomputes the host forward and takes its gradients (``torch.autograd.grad``),
launching ``FlashAttentionScoreGrad``. Values are bitwise the eager host op's, hence eager
CPU's. Dropout: the forward notes the CPU generator's state before it draws (the npu draws
from the CPU default generator, :mod:`msprof_py.adapter.npu_random`) under a key it returns as
``philox_seed``; the backward replays the forward from that state (restoring the generator
after), so it sees the same dropout mask the forward applied.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.fx.traceback as fx_traceback

from msprof_py.adapter import host_ops, runtime
from msprof_py.adapter.custom_ops import device_call
from msprof_py.adapter.tensors import adopt, host_view, is_npu_device

_SDPA = torch.ops.aten.scaled_dot_product_attention.default
_FUSED = torch.ops.aten._scaled_dot_product_fused_attention_overrideable.default
LABEL = "aten::_scaled_dot_product_fused_attention_overrideable"
#: key of the miss reason in the FX meta ``custom`` dict of a decomposed SDPA's nodes
MISS_KEY = "npu_sdpa_miss"
#: key of the decomposed call's number (tells two decomposed SDPA calls apart)
CALL_KEY = "npu_sdpa_call"

#: generator states of dropout forwards, by the key returned as philox_seed (bounded)
_RNG_STATES: OrderedDict[int, torch.Tensor] = OrderedDict()
_RNG_KEEP = 1024
_KEYS = itertools.count(1)
_CALLS = itertools.count(1)


def _mask_shape_ok(mask: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> bool:
    """``mask`` broadcasts as FlashAttentionScore's atten_mask: ``[Sq, Skv]`` or
    ``[B|1, N|1, Sq, Skv]`` (the sequence axes whole)."""
    shape = tuple(mask.shape)
    if len(shape) not in (2, 4) or shape[-2:] != (q.shape[2], k.shape[2]):
        return False
    return len(shape) == 2 or (shape[0] in (1, q.shape[0]) and shape[1] in (1, q.shape[1]))


def decision(args: tuple, kwargs: dict) -> str | None:
    """While tracing: "" when this SDPA call becomes one fused-attention node; the reason
    when an npu call keeps torch's decomposition (a fusion miss); None for calls that are
    not the npu's to fuse (CPU tensors, or arguments eager rejects: the decomposition raises
    the same error)."""
    from msprof_py.adapter.opcost import dtype_name
    from msprof_py.adapter.sdpa import uses_flash_kernel

    b = host_ops.bind(_SDPA, args, kwargs)
    q, k, v, mask = b["query"], b["key"], b["value"], b["attn_mask"]
    if not all(isinstance(t, torch.Tensor) and is_npu_device(t.device) for t in (q, k, v)):
        return None
    if mask is not None and (not isinstance(mask, torch.Tensor) or bool(b["is_causal"])):
        return None  # eager raises: an explicit mask with is_causal
    if mask is not None and mask.dtype not in (torch.bool, q.dtype):
        return None  # eager raises: the mask must be bool or the query's dtype
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return f"inputs are {q.dim()}-D, FlashAttentionScore here takes 4-D [B, N, S, D]"
    if k.shape[1] != q.shape[1] or v.shape[1] != k.shape[1]:
        gqa = bool(b.get("enable_gqa")) and v.shape[1] == k.shape[1]
        if not gqa or q.shape[1] % k.shape[1]:
            return None  # eager raises (heads do not match without a valid GQA)
    spec = runtime.state().npu.spec
    if not uses_flash_kernel(spec, q.dtype):
        if not spec.a2_class:
            return (
                "FlashAttentionScore needs an Atlas A2/A3 chip (Ascend910B, Ascend910_93); "
                f"this is {spec.soc_version}"
            )
        return (
            f"{dtype_name(q.dtype)} SDPA on {spec.soc_version} is no fused-attention node: "
            "SDPA maps to FlashAttentionScore in float16/bfloat16 only (eager runs the math "
            "path)"
        )
    if mask is not None and mask.requires_grad:
        # the CPU's SDPA runs its math path for a mask that takes a gradient; the fused
        # node's host forward runs below autograd and could not tell
        return "the mask requires grad (a learnable bias): kept as torch's decomposition"
    if mask is not None and not _mask_shape_ok(mask, q, k):
        return (
            f"unsupported mask shape {list(mask.shape)}: FlashAttentionScore's atten_mask is "
            f"[Sq, Skv] or [B|1, N|1, Sq, Skv] with Sq={q.shape[2]}, Skv={k.shape[2]}"
        )
    return ""


def trace(args: tuple, kwargs: dict) -> Any:
    """The SDPA call while tracing: the fused-attention node, or torch's decomposition
    (its nodes annotated with the miss reason when the call was the npu's to fuse)."""
    why = decision(args, kwargs)
    if why == "":
        return trace_fused(args, kwargs)
    if why is None:
        return _SDPA.decompose(*args, **kwargs)
    with fx_traceback.annotate({MISS_KEY: why, CALL_KEY: next(_CALLS)}):
        return _SDPA.decompose(*args, **kwargs)


def traced_as_fused(args: tuple, kwargs: dict) -> bool:
    """While tracing: this SDPA call becomes one fused-attention node."""
    return decision(args, kwargs) == ""


def trace_fused(args: tuple, kwargs: dict) -> torch.Tensor:
    """The SDPA call as the fused-attention op (its first output)."""
    b = host_ops.bind(_SDPA, args, kwargs)
    return _FUSED(
        b["query"],
        b["key"],
        b["value"],
        b["attn_mask"],
        float(b["dropout_p"]),
        bool(b["is_causal"]),
        False,
        scale=b["scale"],
    )[0]


def _host_sdpa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    dropout_p: float,
    is_causal: bool,
    scale: float | None,
) -> torch.Tensor:
    with host_ops._host_autocast():
        return torch.nn.functional.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=dropout_p,
            is_causal=is_causal,
            scale=scale,
            enable_gqa=k.shape[-3] != q.shape[-3],
        )


@contextmanager
def _replaying(state: torch.Tensor | None) -> Iterator[None]:
    """The CPU generator at ``state`` inside, back where it was after (None: untouched)."""
    if state is None:
        yield
        return
    now = torch.default_generator.get_state()
    torch.default_generator.set_state(state)
    try:
        yield
    finally:
        torch.default_generator.set_state(now)


def _note_rng() -> int:
    """Keep the CPU generator's state; the key the backward finds it by."""
    key = next(_KEYS)
    _RNG_STATES[key] = torch.default_generator.get_state()
    while len(_RNG_STATES) > _RNG_KEEP:
        _RNG_STATES.popitem(last=False)
    return key


def _noted_rng(seed: Any) -> torch.Tensor:
    """The generator state the forward noted under ``seed``."""
    key = int(host_view(seed).item())
    state = _RNG_STATES.get(key)
    if state is None:
        raise RuntimeError(
            "npu fused attention backward: the dropout forward's generator state is gone "
            f"(more than {_RNG_KEEP} dropout attention forwards since)"
        )
    return state


def _autograd_on() -> torch._C._ForceDispatchKeyGuard:
    """Autograd back on for host ops (a kernel runs below autograd: its keys are excluded)."""
    exclude = torch._C._dispatch_tls_local_exclude_set()
    for key in (torch._C.DispatchKey.AutogradCPU, torch._C.DispatchKey.ADInplaceOrView):
        exclude = exclude.remove(key)
    exclude = exclude.remove(torch._C.DispatchKey.AutogradFunctionality)
    return torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(), exclude)


def _like_layout(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``t`` copied into fresh memory laid out in ``like``'s dimension order (the fused op's
    output matches the query's layout, as its meta function allocates it)."""
    order = sorted(range(like.dim()), key=lambda d: (-like.stride(d), d))
    fresh = torch.empty([t.shape[d] for d in order], dtype=t.dtype, device=t.device)
    inverse = [order.index(d) for d in range(like.dim())]
    return fresh.permute(inverse).copy_(t)


def _plan(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    out: torch.Tensor,
    dropout_p: float,
    causal: bool,
    scale: Any,
) -> host_ops.Plan:
    """What eager mode launches for this SDPA call (mask read, dropout mask included)."""
    from msprof_py.adapter.sdpa import plan_sdpa

    kwargs = {"attn_mask": mask, "dropout_p": dropout_p, "is_causal": causal, "scale": scale}
    call = host_ops.Call(host_ops.bind(_SDPA, (q, k, v), kwargs), (out,), True)
    return plan_sdpa(runtime.state().npu.spec, call)


def _host_or_none(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else host_view(t)


def fused_forward(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_bias: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    return_debug_mask: bool = False,
    *,
    scale: float | None = None,
) -> tuple[Any, ...]:
    """PrivateUse1 kernel of the fused-attention op: the host SDPA with the same mask,
    dropout, scale and GQA; FlashAttentionScore (after DropOutGenMaskV3 with dropout)."""
    with device_call(LABEL, (query, key, value)) as state:
        rng_key = _note_rng() if dropout_p > 0.0 and not state.meta else 0
        out_host = _host_sdpa(
            host_view(query),
            host_view(key),
            host_view(value),
            _host_or_none(attn_bias),
            dropout_p,
            is_causal,
            scale,
        )
        out = adopt(_like_layout(out_host, query), state, LABEL)
        b, h, sq = query.shape[0], query.shape[1], query.shape[2]
        lse = adopt(torch.zeros(b, h, sq, dtype=torch.float32), state, LABEL)
        plan = _plan(query, key, value, attn_bias, out, dropout_p, is_causal, scale)
        host_ops._launch(state, LABEL, plan.forward)
        # philox_seed carries the key of the generator state the backward replays (0: no
        # dropout); npu scalars (a meta tensor among the backward's arguments would send it
        # to the Meta kernel)
        seed = adopt(torch.tensor(rng_key, dtype=torch.long), state, LABEL)
        offset = adopt(torch.zeros((), dtype=torch.long), state, LABEL)
    return out, lse, None, None, sq, key.shape[2], seed, offset, None


def fused_backward(
    grad_out: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_bias: torch.Tensor | None,
    grad_input_mask: list[bool],
    out: torch.Tensor,
    logsumexp: torch.Tensor,
    cum_seq_q: Any,
    cum_seq_k: Any,
    max_q: int,
    max_k: int,
    dropout_p: float,
    is_causal: bool,
    philox_seed: Any,
    philox_offset: Any,
    *,
    scale: float | None = None,
) -> tuple[Any, ...]:
    """PrivateUse1 kernel of the fused-attention gradient: the host forward recomputed (from
    the forward's generator state under dropout) and differentiated (the eager host op's
    gradients, bitwise); the mask's gradient where one is asked for."""
    name = LABEL + "_backward"
    with device_call(name, ()) as state:
        # shapes-only mode (numerics="none"): no values, nothing to replay
        rng = _noted_rng(philox_seed) if dropout_p > 0.0 and not state.meta else None
        leaves = [host_view(t).detach().requires_grad_(True) for t in (query, key, value)]
        want_bias = attn_bias is not None and len(grad_input_mask) > 3 and grad_input_mask[3]
        bias = _host_or_none(attn_bias)
        if want_bias:
            bias = bias.detach().requires_grad_(True)
            leaves.append(bias)
        with _autograd_on(), torch.enable_grad(), _replaying(rng):
            host_out = _host_sdpa(*leaves[:3], bias, dropout_p, is_causal, scale)
            grads = torch.autograd.grad(host_out, leaves, host_view(grad_out))
        keep = [*leaves, host_view(grad_out)]
        # dq, dk, dv laid out like q, k, v (their meta: empty_like)
        laid = [_like_layout(g, t) for g, t in zip(grads, (query, key, value), strict=False)]
        laid += [host_ops._own(g, keep) for g in grads[3:]]
        result = [adopt(g, state, name) for g in laid]
        plan = _plan(query, key, value, attn_bias, out, dropout_p, is_causal, scale)
        host_ops._launch(state, name, plan.backward)
    return (*result[:3], result[3] if want_bias else None)


def register(impl: torch.library.Library) -> None:
    """The PrivateUse1 kernels of the fused-attention op and its gradient (``impl``: an aten
    IMPL library)."""
    impl.impl("_scaled_dot_product_fused_attention_overrideable", fused_forward, "PrivateUse1")
    impl.impl(
        "_scaled_dot_product_fused_attention_overrideable_backward", fused_backward, "PrivateUse1"
    )
