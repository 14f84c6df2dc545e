"""Autocast on npu: the policy, numerics equal to the same casts on CPU, GradScaler."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from msprof_py.device import SimulatedNpu, TaskLog


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_policy(npu: SimulatedNpu, dtype: torch.dtype) -> None:
    x = torch.randn(8, 16, device="npu")
    w = torch.randn(32, 16, device="npu")
    with torch.autocast("npu", dtype=dtype):
        h = F.linear(x, w)
        assert h.dtype == dtype  # matmul-like: low precision
        assert (x @ w.t()).dtype == dtype
        assert torch.softmax(h, -1).dtype == torch.float32  # softmax, norms, losses: fp32
        assert F.layer_norm(h, (32,)).dtype == torch.float32
        assert h.sum().dtype == torch.float32
        target = torch.randint(0, 32, (8,), device="npu")
        assert F.cross_entropy(h, target).dtype == torch.float32
        assert torch.cat([h, x], 1).dtype == torch.float32  # promotion to the widest
        assert h.relu().dtype == dtype  # anything else keeps its input dtype
    assert F.linear(x, w).dtype == torch.float32  # outside the region: unchanged


def test_npu_amp_module_aliases(npu: SimulatedNpu) -> None:
    from torch.npu.amp import GradScaler, autocast

    x = torch.randn(4, 4, device="npu")
    with autocast():
        assert (x @ x).dtype == torch.float16
    with torch.npu.amp.autocast(dtype=torch.bfloat16):
        assert (x @ x).dtype == torch.bfloat16
    assert GradScaler().get_scale() == 65536.0


def test_numerics_equal_the_same_casts_on_cpu(npu: SimulatedNpu) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4))
    x = torch.randn(8, 16)
    target = torch.randint(0, 4, (8,))
    # the policy, spelled out on CPU: linear in fp16, GELU in its input dtype (fp16),
    # layer_norm in fp32, the second linear in fp16; cross entropy is not in the policy: its
    # log_softmax gets an explicit dtype (the input's, fp16) and keeps it, nll_loss runs in fp32
    lin1, _, norm, lin2 = model
    h = F.linear(x.half(), lin1.weight.half(), lin1.bias.half())
    h = F.gelu(h)
    h = F.layer_norm(h.float(), (32,), norm.weight, norm.bias, norm.eps)
    logits = F.linear(h.half(), lin2.weight.half(), lin2.bias.half())
    expected = F.nll_loss(F.log_softmax(logits, 1, dtype=torch.float16).float(), target)
    model = model.to("npu")
    with torch.autocast("npu", dtype=torch.float16):
        got_logits = model(x.to("npu"))
        got = F.cross_entropy(got_logits, target.to("npu"))
    assert torch.equal(got_logits.cpu(), logits)
    assert torch.equal(got.cpu(), expected)


def test_casts_and_low_precision_matmuls_on_the_device(npu: SimulatedNpu, log: TaskLog) -> None:
    a = torch.randn(1024, 1024, device="npu")
    start = len(log.tasks)
    with torch.autocast("npu", dtype=torch.float16):
        a @ a
    fp16 = [t for t in log.tasks[start:] if t.kind.value == "kernel"]
    assert [t.op_type for t in fp16] == ["Cast", "Cast", "MatMul"]
    start = len(log.tasks)
    a @ a
    (fp32,) = [t for t in log.tasks[start:] if t.kind.value == "kernel"]
    assert fp16[-1].input_dtypes == ("float16", "float16")
    assert fp32.input_dtypes == ("float32", "float32")
    assert fp32.duration_ns > 1.5 * fp16[-1].duration_ns  # fp32 runs at half the cube rate


def test_weight_casts_are_cached_within_a_region(npu: SimulatedNpu, log: TaskLog) -> None:
    layer = nn.Linear(64, 64).to("npu")
    x = torch.randn(4, 64, device="npu")
    start = len(log.tasks)
    with torch.autocast("npu", dtype=torch.float16):
        layer(x)
        layer(x)
    casts = [t for t in log.tasks[start:] if t.op_type == "Cast"]
    assert len(casts) == 2 + 2  # weight and bias once, the input twice
    start = len(log.tasks)
    with torch.autocast("npu", dtype=torch.float16):
        layer(x)
    assert sum(t.op_type == "Cast" for t in log.tasks[start:]) == 3  # a new region casts again


def test_grad_scaler_scales_unscales_and_skips_inf_steps(npu: SimulatedNpu, log: TaskLog) -> None:
    torch.manual_seed(0)
    model = nn.Linear(8, 1).to("npu")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("npu", init_scale=1024.0)
    x = torch.randn(4, 8, device="npu")
    with torch.autocast("npu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    before = model.weight.detach().cpu().clone()
    start = len(log.tasks)
    scaler.step(optimizer)
    scaler.update()
    names = [t.op_type for t in log.tasks[start:]]
    assert "AmpForeachNonFiniteCheckAndUnscale" in names and "AmpUpdateScale" in names
    assert "MEMCPY_D2H" in names  # the found-inf check reads a value: a host sync
    assert not torch.equal(model.weight.detach().cpu(), before)
    assert scaler.get_scale() == 1024.0
    # an inf gradient: the step is skipped and the scale backs off
    optimizer.zero_grad()
    with torch.autocast("npu", dtype=torch.float16):
        loss = model(x).float().sum() * float("inf")
    scaler.scale(loss).backward()
    before = model.weight.detach().cpu().clone()
    scaler.step(optimizer)
    scaler.update()
    assert torch.equal(model.weight.detach().cpu(), before)
    assert scaler.get_scale() == 512.0
