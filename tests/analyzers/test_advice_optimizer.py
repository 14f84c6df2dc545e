"""The fused-optimizer rule: the recorded optimizer mode, the fix it names, its gain model."""

from __future__ import annotations

import pytest
from analyze_helpers import Builder, chain

from msprof_py.analyzers import context, engine
from msprof_py.analyzers.findings import FIRED, OK
from msprof_py.analyzers.rules_compute import RuleContext
from msprof_py.profile import Profile

STEP = 300_000
SCHED = 3_000  # ascend910b device scheduling overhead per kernel, ns


def profile(
    cls: str = "SGD", mode: str | None = None, kernel_ns: int = 500, host_ns: int = 5_000
) -> Profile:
    """25 per-tensor ops of ``host_ns`` host time in a ``cls`` step, one kernel each."""
    meta = {"optimizers": {cls: {"mode": mode}}} if mode else {}
    b = Builder(**meta).step(0, 0, STEP)
    b.event("annotation", f"Optimizer.step#{cls}.step", 0, 25 * host_ns)
    ops = [("aten::add_", f"{i + 10};{i + 10}", f"{i + 10}", {}) for i in range(25)]
    chain(b, 0, ops, kernel_ns=kernel_ns, host_ns=host_ns)
    return b.build()


def check(p: Profile):
    data = context.prepare(p, 0, warmup=0)
    return engine.run_rule("fused_optimizer", RuleContext(data, {0: data}))


def test_foreach_in_use_is_recognised_and_fused_is_named() -> None:
    f = check(profile(mode="foreach"))
    assert f.status == FIRED
    assert "foreach, whose ops ran per tensor here" in f.message
    assert "torch.optim.SGD(..., fused=True)" in f.advice and "NpuFusedSGD" in f.advice
    assert "foreach=True" not in f.advice
    assert f.evidence["apply"] == {"optimizer": "SGD", "kwargs": {"fused": True}}


def test_host_bound_step_gains_the_host_dispatch_it_removes() -> None:
    # device: 25 kernels of 0.5 us; the host spends 25 x 5 us dispatching them: host-bound.
    # A fused step dispatches one op: 120 us of host time saved (more than the 72 us of
    # launch overheads), which the idle device absorbs
    f = check(profile(mode="per-parameter"))
    assert f.status == FIRED and "per parameter" in f.message
    assert f.evidence["host_dispatch_saved_us_per_step"] == pytest.approx(120.0)
    assert f.evidence["device_saved_us_per_step"] == pytest.approx(24 * SCHED / 1e3)
    # no sync: the host is busy the whole step, so the device work overlaps it entirely
    assert f.evidence["host_device_overlap"] == 1.0
    assert f.estimated_gain_us == pytest.approx(120.0)


def test_device_bound_step_gains_the_launch_overheads() -> None:
    # 25 kernels of 12 us from t=1 us fill the 300 us step: the host saving (24 us) is
    # hidden behind the device; the 24 launch overheads saved (72 us) are the gain
    f = check(profile(mode="per-parameter", kernel_ns=12_000, host_ns=1_000))
    assert f.status == FIRED
    assert f.evidence["host_device_overlap"] == 1.0
    assert f.estimated_gain_us == pytest.approx(24 * SCHED / 1e3)


def test_serial_host_and_device_savings_add() -> None:
    """The host dispatches for 125 us, then waits at a sync while the device runs 25 x 4 us
    kernels: step 225 us, busy host 125 us + device ~100 us, no overlap. Fusing saves the
    host's 120 us and the device's 72 us of launch overheads."""
    meta = {"optimizers": {"SGD": {"mode": "per-parameter"}}}
    b = Builder(**meta).step(0, 0, 225_000)
    b.event("annotation", "Optimizer.step#SGD.step", 0, 125_000)
    ops = [("aten::add_", f"{i + 10};{i + 10}", f"{i + 10}", {}) for i in range(25)]
    chain(b, 125_000 - 25 * 5_000, ops, kernel_ns=100, host_ns=5_000)
    b.event("sync", "aclrtSynchronizeDevice", 125_000, 225_000)
    for i in range(25):  # the device work the host waits for, after the dispatch
        b.op("aten::mm", 125_000, 125_000, [dict(start=125_000 + 4_000 * i,
             end=129_000 + 4_000 * i, op_type="MatMul", task_type="AI_CORE")])  # fmt: skip
    f = check(b.build())
    assert f.status == FIRED
    assert f.evidence["host_device_overlap"] == pytest.approx(0.0, abs=0.03)
    assert f.estimated_gain_us == pytest.approx(120 + 72, rel=0.02)


def test_a_fused_step_is_ok() -> None:
    assert check(profile(mode="fused")).status == OK
    assert check(profile("NpuFusedSGD")).status == OK


def test_no_fused_variant_no_advice() -> None:
    """Adadelta has no fused step (``Adadelta(fused=True)`` raises) and foreach does not pay
    off here: nothing to recommend."""
    f = check(profile("Adadelta", mode="per-parameter"))
    assert f.status == OK and f.evidence["fused_variant"] is False


def test_a_foreach_step_of_multi_tensor_kernels_is_recognised_and_ok_when_few() -> None:
    """Recorded ``_foreach_*`` ops (torch_npu's multi-tensor kernels): foreach, from the
    profile itself; four kernels a step are too few to fuse."""
    b = Builder().step(0, 0, STEP)
    b.event("annotation", "Optimizer.step#SGD.step", 0, 4 * 5_000)
    ops = [("aten::_foreach_add_", "10;11;12", "10", {}) for _ in range(4)]
    chain(b, 0, ops, kernel_ns=2_000, host_ns=5_000)
    f = check(b.build())
    assert f.status == OK
    assert f.evidence["mode"] == "foreach" and f.evidence["multi_tensor"] is True
    assert f.evidence["kernels_per_step"] == 4


@pytest.mark.parametrize(
    ("device", "kept"), [("ascend910b", (1 + 3, 2)), ("ascend910a", (101, 101))]
)
def test_fused_adam_keeps_its_step_counters_kernels_by_chip(
    device: str, kept: tuple[int, int]
) -> None:
    """A fused Adam step keeps torch's in-place ``_foreach_add_`` on 100 step counters: on the
    910B one op of ceil(100 / 48) = 3 multi-tensor kernels, on the 910A one op and one kernel
    per counter; fused SGD keeps nothing."""
    from msprof_py.analyzers import rules_compute
    from msprof_py.analyzers.findings import rule_specs

    data = context.prepare(Builder(device=device).step(0, 0, STEP).build(), 0, warmup=0)
    fused = rule_specs()["fused_optimizer"].extra["fused"]
    assert rules_compute._kept_by_fused(data, fused["Adam"], 100) == kept
    assert rules_compute._kept_by_fused(data, fused["SGD"], 100) == (1, 1)
