"""SDPA in a compiled graph: one FlashAttentionScore node forward and one
FlashAttentionScoreGrad backward where eager uses the fused kernel (fp16/bf16 on A2/A3);
values and gradients equal eager CPU bitwise."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from msprof_py.device import SimulatedNpu
from msprof_py.graph.passes.sdpa import SDPA_PASS
from msprof_py.graph.runner import compiled_graphs


class TinyAttention(nn.Module):
    """qkv projection, causal SDPA over 2 heads, heads merged back."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(32, 96)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, 2, 16).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return out.transpose(1, 2).reshape(b, s, 32)


def _step(model: nn.Module, x: torch.Tensor, device: str, compiled: bool):
    model = copy.deepcopy(model).to(device)
    run = torch.compile(model, backend="npu") if compiled else model
    xd = x.to(device).detach().requires_grad_()
    out = run(xd)
    out.float().square().sum().backward()
    return out.detach().cpu(), xd.grad.cpu(), model.qkv.weight.grad.cpu()


def _op_types(role: str) -> list[str]:
    [graph] = [g for g in compiled_graphs() if g.name.endswith(role)]
    return [k.op_type for k in graph.last_plan.kernels]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_sdpa_is_one_flash_attention_node(npu: SimulatedNpu, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    model = TinyAttention().to(dtype)
    x = torch.randn(2, 64, 32).to(dtype)
    cpu = _step(model, x, "cpu", compiled=False)
    npu_result = _step(model, x, "npu", compiled=True)
    for what, a, b in zip(("output", "input grad", "weight grad"), cpu, npu_result, strict=True):
        assert torch.equal(a, b), what
    forward, backward = _op_types("_forward"), _op_types("_backward")
    assert forward.count("FlashAttentionScore") == 1
    assert backward.count("FlashAttentionScoreGrad") == 1
    # the whole attention is the fused kernel: no score matmul, softmax or cast around it
    assert forward == ["MatMul", "FlashAttentionScore"]
    assert not {"BatchMatMul", "SoftmaxV2", "SoftmaxGrad", "Cast"} & set(forward + backward)


def test_fp32_sdpa_keeps_the_math_path(npu: SimulatedNpu) -> None:
    """fp32: eager runs the math path; the graph holds torch's math decomposition, which the
    attention pass does not fuse either (FlashAttentionScore is fp16/bf16 only: a recorded
    miss). Its values are close to, not bitwise, the CPU's (the CPU runs its own flash
    kernel, a different summation order)."""
    torch.manual_seed(0)
    model = TinyAttention()
    x = torch.randn(2, 64, 32)
    cpu = _step(model, x, "cpu", compiled=False)
    npu_result = _step(model, x, "npu", compiled=True)
    for a, b in zip(cpu, npu_result, strict=True):
        torch.testing.assert_close(a, b)
    [graph] = [g for g in compiled_graphs() if g.name.endswith("_forward")]
    targets = {n.target for n in graph.last_plan.graph.nodes}
    assert "_scaled_dot_product_fused_attention_overrideable" not in targets
    assert "bmm" in targets
    # fusion_result.json lists the call as a miss, with why, over the nodes it became
    [miss] = [r for r in graph.last_plan.records if r.pass_name == SDPA_PASS]
    assert not miss.hit and "bmm" in miss.nodes
    assert miss.reason.startswith("float32 SDPA on Ascend910B")
    # ... and its decomposition is no FlashAttentionScore hit: a miss with the same cause
    [fa] = [r for r in graph.last_plan.records if r.pass_name == "FlashAttentionFusionPass"]
    assert not fa.hit and fa.reason.endswith("float16 and bfloat16 only, not float32")
    assert "FlashAttentionScore" not in _op_types("_forward")
