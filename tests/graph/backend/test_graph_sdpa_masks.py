"""SDPA with masks, dropout, scale and GQA in a compiled graph: each call is one
FlashAttentionScore node (FlashAttentionScoreGrad backward) with its attributes recorded,
costed with the mask read, values and gradients bitwise eager CPU's (dropout included: the
same generator draws); misses keep torch's decomposition and say why."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from msprof_py.adapter.torch_npu.fused import bnsd_attention
from msprof_py.device import SimulatedNpu
from msprof_py.graph.passes.sdpa import SDPA_GRAD_PASS, SDPA_PASS
from msprof_py.graph.runner import compiled_graphs

B, S, HEADS, KV_HEADS, D = 2, 16, 2, 1, 16


class MaskedAttention(nn.Module):
    """Three SDPA calls over 2 query heads and 1 key/value head (GQA): a boolean padding mask
    with dropout and a scale, an additive mask, and a causal call."""

    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(32, HEADS * D)
        self.kv = nn.Linear(32, 2 * KV_HEADS * D)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q(x).view(b, s, HEADS, D).transpose(1, 2)
        k, v = self.kv(x).view(b, s, 2, KV_HEADS, D).permute(2, 0, 3, 1, 4)
        padding = keep[:, None, None, :].expand(b, 1, s, s)  # as Hugging Face builds it
        additive = torch.zeros(b, 1, s, s, dtype=x.dtype, device=x.device).masked_fill(
            ~padding, torch.finfo(x.dtype).min
        )
        p = 0.2 if self.training else 0.0
        a = F.scaled_dot_product_attention(
            q, k, v, attn_mask=padding, dropout_p=p, scale=0.3, enable_gqa=True
        )
        c = F.scaled_dot_product_attention(q, k, v, attn_mask=additive, enable_gqa=True)
        e = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return (a + c + e).transpose(1, 2).reshape(b, s, HEADS * D)


def _keep() -> torch.Tensor:
    keep = torch.ones(B, S, dtype=torch.bool)
    keep[1, -5:] = False
    return keep


def _step(model: nn.Module, x: torch.Tensor, device: str, compiled: bool) -> list[torch.Tensor]:
    model = copy.deepcopy(model).to(device)
    run = torch.compile(model, backend="npu") if compiled else model
    xd = x.to(device).detach().requires_grad_()
    torch.manual_seed(123)  # the dropout draws
    out = run(xd, _keep().to(device))
    out.float().square().sum().backward()
    return [t.detach().cpu() for t in (out, xd.grad, model.q.weight.grad, model.kv.weight.grad)]


def _plan(role: str):
    [graph] = [g for g in compiled_graphs() if g.name.endswith(role)]
    return graph.last_plan


def test_masked_gqa_dropout_attention_is_fused_and_bitwise_eager(npu: SimulatedNpu) -> None:
    torch.manual_seed(0)
    model = MaskedAttention().half()
    x = torch.randn(B, S, 32).half()
    cpu = _step(model, x, "cpu", compiled=False)
    got = _step(model, x, "npu", compiled=True)
    for what, a, b in zip(("output", "dx", "dWq", "dWkv"), cpu, got, strict=True):
        assert torch.equal(a, b), what
    forward, backward = _plan("_forward"), _plan("_backward")
    fw_types = [k.op_type for k in forward.kernels]
    bw_types = [k.op_type for k in backward.kernels]
    assert fw_types.count("FlashAttentionScore") == 3 and fw_types.count("DropOutGenMaskV3") == 1
    assert bw_types.count("FlashAttentionScoreGrad") == 3
    assert not {"BatchMatMul", "SoftmaxV2", "SoftmaxGrad"} & set(fw_types + bw_types)
    # the dropout call's node launches two kernels; the next SDPA node is called <node>_1:
    # launch names stay unique (the two kernels are <node>_k0, <node>_k1)
    for plan in (forward, backward):
        names = [k.name for k in plan.kernels]
        assert len(set(names)) == len(names), names
    fused = "_scaled_dot_product_fused_attention_overrideable"
    fw_names = [k.name for k in forward.kernels]
    assert {f"{fused}_k0", f"{fused}_k1", f"{fused}_1"} <= set(fw_names)
    hits = [r for r in forward.records if r.pass_name == SDPA_PASS]
    assert len(hits) == 3 and all(r.hit for r in hits)
    bool_mask, additive, causal = (r.reason for r in hits)
    assert "keep_prob=0.8" in bool_mask and "scale_value=0.3" in bool_mask
    assert f"head_num={HEADS}, kv_head_num={KV_HEADS}" in bool_mask
    assert f"atten_mask=[{B}, 1, {S}, {S}] bool" in bool_mask
    assert f"pse=[{B}, 1, {S}, {S}] float16" in additive and "keep_prob=1.0" in additive
    assert "sparse_mode=2" in causal
    grads = [r for r in backward.records if r.pass_name == SDPA_GRAD_PASS]
    assert len(grads) == 3 and all(r.hit for r in grads)
    # the additive call's kernel: the FA tile model over q, k, v, the mask, out and statistics
    [fa] = [k for k in forward.kernels if k.members == hits[1].nodes]
    half = 2
    q_bytes = B * HEADS * S * D * half
    kv_bytes = 2 * B * KV_HEADS * S * D * half
    mask_bytes = B * S * S * half
    stats = 2 * B * HEADS * S * 8 * 4
    nbytes = 2 * q_bytes + kv_bytes + mask_bytes + stats
    model_cost = bnsd_attention(B, HEADS, KV_HEADS, S, S, D, D, 1 / math.sqrt(D), 1.0, False, True)
    assert fa.cost == model_cost.cost("float16", nbytes, backward=False)
    assert fa.cost.bytes == nbytes


_SHAPES_ONLY = """
import torch, torch.nn.functional as F
from torch import nn
import msprof_py.adapter as ad
ad.install(numerics="none")
from msprof_py.graph.runner import compiled_graphs

class A(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(32, 32)

    def forward(self, x, m):
        q = self.q(x).view(2, 8, 2, 16).transpose(1, 2)
        return F.scaled_dot_product_attention(q, q, q, attn_mask=m, dropout_p=0.2).sum()

run = torch.compile(A().half().to("npu"), backend="npu")
x = torch.randn(2, 8, 32).half().to("npu").requires_grad_()
run(x, torch.ones(2, 1, 8, 8, dtype=torch.bool, device="npu")).backward()
for g in compiled_graphs():
    print(g.name, *[k.op_type for k in g.last_plan.kernels])
"""


@pytest.mark.slow  # a fresh process with Dynamo: ~15 s
def test_masked_dropout_attention_in_shapes_only_mode() -> None:
    """numerics="none": no values, no generator state to replay; the kernels are the same."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _SHAPES_ONLY], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert lines["graph0_forward"].split().count("FlashAttentionScore") == 1
    assert "DropOutGenMaskV3 FlashAttentionScoreGrad" in lines["graph0_backward"]
