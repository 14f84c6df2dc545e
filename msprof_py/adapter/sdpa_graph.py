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

Running those nodes on the npu (this module's PrivateUse1 kernels): the forward computes the
CPU's SDPA on the host views and launches ``FlashAttentionScore``; the backward recomputes the
host forward and takes its gradients (``torch.autograd.grad``), launching
``FlashAttentionScoreGrad``. Values are bitwise the eager host op's. Only calls without a mask
and without dropout on 4-D inputs with as many key/value heads as query heads take this path
(the backward recomputes the forward, so a dropout mask could not be reproduced); the others
keep the decomposition.
"""

from __future__ import annotations

from typing import Any

import torch

from msprof_py.adapter import host_ops, runtime
from msprof_py.adapter.custom_ops import device_call
from msprof_py.adapter.tensors import adopt, host_view, is_npu_device

_SDPA = torch.ops.aten.scaled_dot_product_attention.default
_FUSED = torch.ops.aten._scaled_dot_product_fused_attention_overrideable.default
LABEL = "aten::_scaled_dot_product_fused_attention_overrideable"


def traced_as_fused(args: tuple, kwargs: dict) -> bool:
    """While tracing: this SDPA call becomes one fused-attention node."""
    from msprof_py.adapter.sdpa import uses_flash_kernel

    bound = host_ops.bind(_SDPA, args, kwargs)
    q, k, v = bound["query"], bound["key"], bound["value"]
    if not all(isinstance(t, torch.Tensor) and is_npu_device(t.device) for t in (q, k, v)):
        return False
    if bound["attn_mask"] is not None or float(bound["dropout_p"]) != 0.0:
        return False
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4 or k.shape[1] != q.shape[1]:
        return False
    if bound.get("enable_gqa"):
        return False
    return uses_flash_kernel(runtime.state().npu.spec, q.dtype)


def trace_fused(args: tuple, kwargs: dict) -> torch.Tensor:
    """The SDPA call as the fused-attention op (its first output)."""
    b = host_ops.bind(_SDPA, args, kwargs)
    return _FUSED(
        b["query"], b["key"], b["value"], None, 0.0, bool(b["is_causal"]), False, scale=b["scale"]
    )[0]


def _host_sdpa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool, scale: float | None
) -> torch.Tensor:
    with host_ops._host_autocast():
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=is_causal, scale=scale
        )


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
    fresh = torch.empty([t.shape[d] for d in order], dtype=t.dtype)
    inverse = [order.index(d) for d in range(like.dim())]
    return fresh.permute(inverse).copy_(t)


def _plan(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, causal: bool, scale: Any
) -> host_ops.Plan:
    from msprof_py.adapter.sdpa import plan_sdpa

    call = host_ops.Call(
        host_ops.bind(_SDPA, (q, k, v), {"is_causal": causal, "scale": scale}), (out,), True
    )
    return plan_sdpa(runtime.state().npu.spec, call)


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
    """PrivateUse1 kernel of the fused-attention op (no mask, no dropout)."""
    if attn_bias is not None or dropout_p != 0.0:
        raise RuntimeError("the npu's fused attention node takes no mask and no dropout")
    with device_call(LABEL, (query, key, value)) as state:
        out_host = _host_sdpa(host_view(query), host_view(key), host_view(value), is_causal, scale)
        out = adopt(_like_layout(out_host, query), state, LABEL)
        b, h, sq = query.shape[0], query.shape[1], query.shape[2]
        lse = adopt(torch.zeros(b, h, sq, dtype=torch.float32), state, LABEL)
        plan = _plan(query, key, value, out, is_causal, scale)
        host_ops._launch(state, LABEL, plan.forward)
        # no dropout: seed and offset are unused; npu scalars (a meta tensor among the
        # backward's arguments would send it to the Meta kernel)
        seed = adopt(torch.zeros((), dtype=torch.long), state, LABEL)
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
    """PrivateUse1 kernel of the fused-attention gradient: the host forward recomputed and
    differentiated (the eager host op's gradients, bitwise)."""
    name = LABEL + "_backward"
    with device_call(name, ()) as state:
        leaves = [host_view(t).detach().requires_grad_(True) for t in (query, key, value)]
        with _autograd_on(), torch.enable_grad():
            host_out = _host_sdpa(*leaves, is_causal, scale)
            grads = torch.autograd.grad(host_out, leaves, host_view(grad_out))
        keep = [*leaves, host_view(grad_out)]
        result = tuple(adopt(host_ops._own(g, keep), state, name) for g in grads)
        plan = _plan(query, key, value, out, is_causal, scale)
        host_ops._launch(state, name, plan.backward)
    return (*result, None)


def register(impl: torch.library.Library) -> None:
    """The PrivateUse1 kernels of the fused-attention op and its gradient (``impl``: an aten
    IMPL library)."""
    impl.impl("_scaled_dot_product_fused_attention_overrideable", fused_forward, "PrivateUse1")
    impl.impl(
        "_scaled_dot_product_fused_attention_overrideable_backward", fused_backward, "PrivateUse1"
    )
