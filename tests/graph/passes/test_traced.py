"""The passes on real aot_autograd graphs (torch 2.13, CPU): the ATen names they match."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from fx_ir import trace  # noqa: E402

from msprof_py.device.spec import DeviceSpec  # noqa: E402
from msprof_py.graph.passes import run_passes  # noqa: E402

A2 = DeviceSpec.load("ascend910b")


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln = torch.nn.LayerNorm(32)
        self.qkv = torch.nn.Linear(32, 96)
        self.fc = torch.nn.Linear(32, 64)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln(x)).split(32, -1)
        q, k, v = (z.view(b, t, 4, 8).transpose(1, 2) for z in (q, k, v))
        a = torch.nn.functional.dropout((q @ k.transpose(-2, -1) * 0.35 + mask).softmax(-1), 0.1)
        o = (a @ v).transpose(1, 2).reshape(b, t, c)
        return torch.nn.functional.gelu(self.fc(o))


def _passes(graphs):
    return {name: run_passes(g, A2) for name, g in graphs.items()}


@pytest.mark.slow
def test_transformer_block_forward_and_backward() -> None:
    bf16 = torch.bfloat16
    x = torch.randn(2, 5, 32, dtype=bf16, requires_grad=True)
    results = _passes(trace(_Block().to(bf16), x, torch.zeros(5, 5, dtype=bf16)))
    fw = {k.pass_name for k in results["fw"].kernels}
    assert {"FlashAttentionFusionPass", "MatMulEpilogueFusionPass"} <= fw
    bw = {k.pass_name for k in results["bw"].kernels}
    assert "FlashAttentionGradFusionPass" in bw
    # in float32 the same block is a recorded miss both ways (FlashAttentionScore is fp16/bf16)
    results = _passes(trace(_Block(), torch.randn(2, 5, 32, requires_grad=True), torch.zeros(5, 5)))
    for role, name in (("fw", "FlashAttentionFusionPass"), ("bw", "FlashAttentionGradFusionPass")):
        assert name not in {k.pass_name for k in results[role].kernels}
        [miss] = [r for r in results[role].records if r.pass_name == name]
        assert not miss.hit and "not float32" in miss.reason


def test_cnn_training_and_mlp() -> None:
    cnn = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 3)
    )
    results = _passes(trace(cnn, torch.randn(2, 3, 8, 8)))
    assert "ZBNupdateReluV2Conv2DBNreducePass" in {k.pass_name for k in results["fw"].kernels}
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.SiLU(), torch.nn.Linear(32, 8))
    results = _passes(trace(mlp, torch.randn(4, 16)))
    [fused] = [k for k in results["fw"].kernels if k.pass_name]
    assert fused.pass_name == "MatMulEpilogueFusionPass" and len(fused.members) == 2


def test_handwritten_rms_norm() -> None:
    w = torch.nn.Parameter(torch.ones(32))

    def rms(x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    results = _passes(trace(rms, torch.randn(2, 5, 32, requires_grad=True)))
    assert [k.pass_name for k in results["fw"].kernels] == ["RMSNormFusionPass"]
