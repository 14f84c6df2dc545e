"""The AMP re-cost (msprof_py.analyzers.ampplan) on a hand-built float32 MLP step: the casts
autocast adds, the kernels it changes, and the step change, checked against hand counts."""

from __future__ import annotations

import pytest
from analyze_helpers import Builder

from msprof_py.analyzers import ampplan, context
from msprof_py.device import costmodel
from msprof_py.device.spec import DeviceSpec

SPEC = DeviceSpec.preset("ascend910b")
SCHED = SPEC.dispatch.device_sched_ns
KERNEL_NS = 20_000
HOST_NS = 1_000


def _op(b: Builder, t: int, name: str, ins: str, out: str, task_type: str, **cols) -> int:
    n_in = len(ins.split(";"))
    dtypes = ";".join(["float32"] * n_in)
    kernel = dict(
        start=t + HOST_NS,
        end=t + HOST_NS + KERNEL_NS,
        task_type=task_type,
        op_type="MatMul" if task_type == "AI_CORE" else "Vector",
        input_shapes=ins,
        input_dtypes=dtypes,
        output_shapes=out,
        output_dtypes="float32",
    )
    b.op(name, t, t + HOST_NS, [kernel], input_shapes=ins, input_dtypes=dtypes, **cols)
    return t + HOST_NS + KERNEL_NS


def mlp_step() -> context.RankData:
    """x (64x32) -> Linear(32, 16) -> GELU -> LayerNorm -> Linear(16, 16); backward on a
    second thread; the host then waits for the device."""
    b = Builder().step(0, 0, 1_000_000)
    copy = dict(start=0, end=500, kind="memcpy", copy_kind="HOST_TO_DEVICE", task_type="DMA")
    b.op("aten::copy_", 0, 500, [copy], input_shapes="64,32;64,32", input_dtypes="float32;float32")
    t = 1_000
    fwd = [
        ("aten::addmm", "16;64,32;32,16", "64,16", "AI_CORE", "MLP/Linear"),
        ("aten::gelu", "64,16", "64,16", "AI_VECTOR_CORE", "MLP/GELU"),
        ("aten::native_layer_norm", "64,16;16;16", "64,16", "AI_VECTOR_CORE", "MLP/LayerNorm"),
        ("aten::addmm", "16;64,16;16,16", "64,16", "AI_CORE", "MLP/Linear"),
    ]
    for name, ins, out, tt, module in fwd:
        t = _op(b, t, name, ins, out, tt, module=module)
    bwd = [
        ("aten::mm", "64,16;16,16", "64,16", "AI_CORE"),
        ("aten::native_layer_norm_backward", "64,16;64,16", "64,16", "AI_VECTOR_CORE"),
        ("aten::gelu_backward", "64,16;64,16", "64,16", "AI_VECTOR_CORE"),
        ("aten::mm", "16,64;64,32", "16,32", "AI_CORE"),
    ]
    for name, ins, out, tt in bwd:
        t = _op(b, t, name, ins, out, tt, thread=2)
    b.event("sync", "aclrtSynchronizeDevice", t, 1_000_000)
    return context.prepare(b.build(), 0, warmup=0)


def test_policy_agrees_with_the_adapters_autocast() -> None:
    from msprof_py.adapter import amp

    p = ampplan.policy()
    assert p["lower"] == frozenset(amp.LOWER_PRECISION)
    assert p["fp32"] == frozenset(amp.FP32)


def test_casts_follow_autocast_forward_and_backward() -> None:
    plan = ampplan.plan(mlp_step())
    assert plan is not None and plan.dtype == "bfloat16"
    fwd = plan.casts[~plan.casts["backward"]]
    # Linear 1: bias (16), the batch (64x32), the weight (32x16) cast down; the LayerNorm's
    # input (GELU's bf16 output, 64x16) cast up; Linear 2: bias, the LayerNorm's fp32 output
    # and the weight (16x16) cast down
    assert fwd["elements"].tolist() == [16, 2048, 512, 1024, 16, 1024, 256]
    assert fwd["direction"].tolist() == ["down"] * 3 + ["up"] + ["down"] * 3
    # backward mirrors every cast but the batch's (it needs no gradient)
    bwd = plan.casts[plan.casts["backward"]]
    assert sorted(bwd["elements"]) == sorted([16, 512, 1024, 16, 1024, 256])
    assert (bwd[bwd["elements"] == 1024]["direction"].tolist()) == ["down", "up"]
    # each cast: one vector kernel over its elements, 4 + 2 bytes each
    n = 2048
    expect = costmodel.vector_cost(SPEC, elements=n, dtype="bfloat16", bytes_moved=6 * n)
    assert plan.casts.loc[plan.casts["elements"] == n, "ns"].iloc[0] == expect.duration_ns


def test_kernels_change_where_autocast_changes_their_dtype() -> None:
    plan = ampplan.plan(mlp_step())
    k = plan.kernels.set_index("name")
    # GELU and its backward follow the bf16 matmul; LayerNorm (fp32 policy) and its backward
    # stay in float32
    assert set(k.index) == {"aten::addmm", "aten::gelu", "aten::gelu_backward", "aten::mm"}
    half = SCHED + (KERNEL_NS - SCHED) * 0.5
    assert k.loc["aten::gelu", "amp_ns"] == pytest.approx(half)
    assert k.loc["aten::gelu_backward", "amp_ns"] == pytest.approx(half)
    # a matmul: the recorded work scaled by the cost model's bf16 / fp32 ratio
    m, kk, n = 64, 32, 16
    c32 = costmodel.matmul_cost(
        SPEC, m, n, kk, dtype="float32", bytes_moved=(16 + 64 * 32 + 32 * 16 + 64 * 16) * 4,
        vector_elements=m * n,
    )  # fmt: skip
    c16 = costmodel.matmul_cost(
        SPEC, m, n, kk, dtype="bfloat16", bytes_moved=(16 + 64 * 32 + 32 * 16 + 64 * 16) * 2,
        vector_elements=m * n,
    )  # fmt: skip
    ratio = (c16.duration_ns - SCHED) / (c32.duration_ns - SCHED)
    first = plan.kernels[plan.kernels["name"] == "aten::addmm"].iloc[0]
    assert first["amp_ns"] == pytest.approx(SCHED + (KERNEL_NS - SCHED) * ratio)


def test_step_change_is_set_by_the_longer_of_host_and_device() -> None:
    # device-bound: the device's change counts, added host work hides in the host's slack
    assert ampplan.step_change(host=300, device=1000, dh=100, dd=-50) == -50
    # host-bound: the host's added dispatch counts, device savings do not show
    assert ampplan.step_change(host=1000, device=300, dh=100, dd=-50) == 100
    # the two cross over
    assert ampplan.step_change(host=900, device=1000, dh=200, dd=-300) == 100


def test_plan_step_delta_adds_casts_and_dispatch() -> None:
    data = mlp_step()
    plan = ampplan.plan(data)
    changed = float((plan.kernels["amp_ns"] - plan.kernels["recorded_ns"]).sum())
    assert plan.device_delta_ns == pytest.approx(changed + plan.casts["ns"].sum())
    assert plan.host_delta_ns == pytest.approx(13 * HOST_NS)  # one host op per cast
    # the host waits for the device: the step follows the device's change
    assert plan.host_ns < plan.device_ns
    assert plan.step_delta_ns == pytest.approx(plan.device_delta_ns)
