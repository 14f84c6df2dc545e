"""The device memory peak of a compiled inference call, from the memory plan rules (README,
Graph mode): intermediates (values a kernel writes that leave neither the graph nor a fused
kernel) share one workspace block, each rounded up to 512 bytes, two sharing bytes only when
one is dead before the other is written, placed largest first; graph outputs get memory of
their own; parameters and inputs stay where they are. The allocator rounds blocks to 512 bytes
as torch's does."""

from __future__ import annotations

import itertools

import torch
from torch import nn

from msprof_py.device import SimulatedNpu
from msprof_py.graph.runner import compiled_graphs

BATCH, FP32 = 4, 4
WIDTHS = (64, 128, 32, 128, 16)


def _align(n: int) -> int:
    return -(-n // 512) * 512


def _mlp() -> nn.Module:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(WIDTHS)):
        layers.append(nn.Linear(a, b))
        if i < len(WIDTHS) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers).eval()


def test_compiled_peak_is_workspace_plus_output(npu: SimulatedNpu) -> None:
    torch.manual_seed(0)
    model = _mlp().to("npu")
    run = torch.compile(model, backend="npu")
    x = torch.randn(BATCH, WIDTHS[0]).to("npu")
    with torch.no_grad():
        run(x)  # compile, first call
        torch.npu.synchronize()
        before = torch.npu.memory_allocated()
        torch.npu.reset_peak_memory_stats()
        out = run(x)
        torch.npu.synchronize()
        peak = torch.npu.max_memory_allocated()
    # held before the call: the parameters and the input, each block rounded to 512 bytes
    params = sum(_align(p.numel() * FP32) for p in model.parameters())
    assert before == params + _align(x.numel() * FP32)
    [graph] = [g for g in compiled_graphs() if g.last_plan is not None]
    plan = graph.last_plan
    # Linear + ReLU pairs are one MatMul each (epilogue fusion): four kernels, three
    # intermediates h1 (128 wide, live over kernels 0-1), h2 (32, 1-2), h3 (128, 2-3)
    assert [k.op_type for k in plan.kernels] == ["MatMul"] * 4
    h1, h2, h3 = (_align(BATCH * w * FP32) for w in WIDTHS[1:4])
    assert plan.memory.no_reuse_bytes == h1 + h2 + h3
    # largest first: h1 at 0; h3 is written after h1's last read, so it reuses offset 0; h2
    # overlaps both and goes above them
    assert plan.memory.workspace_bytes == max(h1, h3) + h2
    # the call: the workspace block, then the output's own block, then the workspace freed
    assert peak - before == plan.memory.workspace_bytes + _align(out.numel() * FP32)
