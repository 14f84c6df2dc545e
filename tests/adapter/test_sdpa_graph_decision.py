"""Which npu SDPA calls a compiled graph traces as one fused-attention node
(:func:`msprof_py.adapter.sdpa_graph.decision`): "" for the fused node, the miss reason, or
None for calls eager rejects (torch's decomposition raises the same error)."""

from __future__ import annotations

import pytest
import torch

from msprof_py.adapter import sdpa_graph
from msprof_py.device import SimulatedNpu

B, S, D = 2, 16, 16


def _args(dtype: torch.dtype, mask_shape: tuple[int, ...] | None, heads: int = 2):
    q = torch.zeros(B, 2, S, D, dtype=dtype, device="npu")
    k = torch.zeros(B, heads, S, D, dtype=dtype, device="npu")
    mask = None if mask_shape is None else torch.ones(mask_shape, dtype=torch.bool, device="npu")
    return (q, k, k), {"attn_mask": mask}


@pytest.mark.parametrize(
    ("dtype", "mask", "expect"),
    [
        (torch.float16, (B, 1, S, S), ""),
        (torch.bfloat16, (S, S), ""),
        (torch.float16, (1, 2, S, S), ""),
        (torch.float16, (B, 1, 1, S), "unsupported mask shape [2, 1, 1, 16]"),
        (torch.float16, (S,), "unsupported mask shape [16]"),
        (torch.float32, (B, 1, S, S), "float32 SDPA on Ascend910B"),
    ],
)
def test_which_calls_become_the_fused_node(
    npu: SimulatedNpu, dtype: torch.dtype, mask: tuple[int, ...], expect: str
) -> None:
    args, kwargs = _args(dtype, mask)
    why = sdpa_graph.decision(args, kwargs)
    assert why == expect if expect == "" else why.startswith(expect), why


def test_calls_eager_rejects_are_left_to_the_decomposition(npu: SimulatedNpu) -> None:
    args, kwargs = _args(torch.float16, None, heads=1)
    assert sdpa_graph.decision(args, kwargs) is None  # fewer kv heads without enable_gqa
    assert sdpa_graph.decision(args, {"enable_gqa": True}) == ""
    args, kwargs = _args(torch.float16, (S, S))
    assert sdpa_graph.decision(args, {**kwargs, "is_causal": True}) is None
    cpu = tuple(t.cpu() for t in args)
    assert sdpa_graph.decision(cpu, {}) is None


def test_reduce_overhead_counts_fused_attention_as_random_only_with_dropout() -> None:
    from msprof_py.graph.backend import _rng_ops

    fused = torch.ops.aten._scaled_dot_product_fused_attention_overrideable.default
    graph = torch.fx.Graph()
    q = graph.placeholder("q")
    graph.call_function(fused, (q, q, q, None, 0.0, True))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    assert _rng_ops(gm) == []
    graph.call_function(fused, (q, q, q, None, 0.1))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    assert _rng_ops(gm) == ["_scaled_dot_product_fused_attention_overrideable"]


def test_a_mask_taking_a_gradient_keeps_the_decomposition(npu: SimulatedNpu) -> None:
    """The CPU runs its math path for such a mask (other values than its flash kernel's); the
    decomposition is that math path."""
    (q, k, v), _ = _args(torch.float16, None)
    bias = torch.zeros(1, 2, S, S, dtype=torch.float16, device="npu")
    assert sdpa_graph.decision((q, k, v), {"attn_mask": bias}) == ""
    why = sdpa_graph.decision((q, k, v), {"attn_mask": bias.requires_grad_()})
    assert why.startswith("the mask requires grad")
