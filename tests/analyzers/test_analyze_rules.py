"""Every rule firing, not firing, and SKIPPED (with what is missing), on hand-built profiles."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from analyze_helpers import Builder, chain, cluster

from msprof_py.analyzers import context, engine
from msprof_py.analyzers.findings import FIRED, OK, SKIPPED, rule_specs
from msprof_py.analyzers.rules_compute import RuleContext
from msprof_py.profile import Profile

STEP = 100_000
GIB = 1024**3


def check(profile: Profile, rule: str, batch_size: int | None = None):
    per_rank = {r: context.prepare(profile, r, warmup=0) for r in profile.ranks}
    ctx = RuleContext(per_rank[profile.ranks[0]], per_rank, batch_size)
    return engine.run_rule(rule, ctx)


def base(**meta) -> Builder:
    return Builder(**meta).step(0, 0, STEP)


def busy(b: Builder, start: int = 0, end: int = STEP) -> Builder:
    """A long compute kernel keeping the device busy (from a host op)."""
    b.op(
        "aten::mm",
        start,
        start + 1000,
        [
            dict(
                start=start,
                end=end,
                op_type="MatMul",
                task_type="AI_CORE",
                input_dtypes="float16;float16",
                flops=1e9,
                bytes=10**6,
            )
        ],
    )
    return b


# ---- scenarios: name -> builder ------------------------------------------------------------

ACT = "8,16,32,32"


def conv_chain(linked: bool = True) -> Profile:
    b = base()
    bn_in = ACT if linked else "8,32,16,16"
    chain(
        b,
        0,
        [
            (
                "aten::convolution_overrideable",
                "8,3,32,32;16,3,3,3",
                ACT,
                {"op_type": "Conv2D", "task_type": "AI_CORE", "bytes": 600_000},
            ),
            ("aten::native_batch_norm", f"{bn_in};16;16;16;16", bn_in, {"bytes": 1_048_576}),
            ("aten::relu_", bn_in, bn_in, {"bytes": 1_048_576}),
        ],
    )
    return b.build()


def matmul_gelu(fused: bool = False) -> Profile:
    b = base()
    ops = [
        (
            "aten::addmm",
            "512;512,128;128,512",
            "512,512",
            {"task_type": "AI_CORE", "bytes": 1_574_912, "flops": 6.7e7},
        )
    ]
    if not fused:
        ops.append(("aten::gelu", "512,512", "512,512", {"bytes": 2_097_152, "flops": 2e6}))
    chain(b, 0, ops, kernel_ns=5000)
    return b.build()


def attention(present: bool = True) -> Profile:
    b = base()
    ops = [
        ("aten::bmm", "32,64,32;32,32,64", "32,64,64", {"task_type": "AI_CORE", "bytes": 10**6}),
        ("aten::div", "8,4,64,64", "8,4,64,64", {"bytes": 10**6}),
        ("aten::_softmax", "8,4,64,64", "8,4,64,64", {"bytes": 10**6}),
        ("aten::bmm", "32,64,64;32,64,32", "32,64,32", {"task_type": "AI_CORE", "bytes": 10**6}),
    ]
    chain(b, 0, ops if present else ops[:1])
    return b.build()


def layernorm(present: bool = True) -> Profile:
    x, r = "8,64,128", "8,64,1"
    ops = [
        ("aten::mean", x, r, {}),
        ("aten::sub", f"{x};{r}", x, {}),
        ("aten::pow", x, x, {}),
        ("aten::mean", x, r, {}),
        ("aten::add", r, r, {}),
        ("aten::rsqrt", r, r, {}),
        ("aten::mul", f"{x};{r}", x, {}),
    ]
    b = base()
    chain(b, 0, ops if present else [("aten::native_layer_norm", f"{x};128;128", x, {})])
    return b.build()


def softmax(present: bool = True) -> Profile:
    x, r = "64,256", "64,1"
    ops = [
        ("aten::amax", x, r, {}),
        ("aten::sub", f"{x};{r}", x, {}),
        ("aten::exp", x, x, {}),
        ("aten::sum", x, r, {}),
        ("aten::div", f"{x};{r}", x, {}),
    ]
    b = base()
    chain(b, 0, ops if present else [("aten::_softmax", x, x, {})])
    return b.build()


def gelu(present: bool = True) -> Profile:
    x = "512,512"
    ops = [
        ("aten::div", x, x, {}),
        ("aten::erf", x, x, {}),
        ("aten::add", x, x, {}),
        ("aten::mul", f"{x};{x}", x, {}),
        ("aten::mul", x, x, {}),
    ]
    b = base()
    chain(b, 0, ops if present else [("aten::gelu", x, x, {})])
    return b.build()


def elementwise(chains: int = 2) -> Profile:
    """``chains`` elementwise chains, each followed by a matmul, launched back to back (the
    replayed gain needs a step the host does not bind)."""
    b = base()
    ops = []
    for i in range(chains):
        x = f"{1000 + i}"
        ops += [
            ("aten::add", f"{x};{x}", x, {"bytes": 8000}),
            ("aten::mul", x, x, {"bytes": 8000}),
            ("aten::sigmoid", x, x, {"bytes": 8000}),
            ("aten::mm", "64,64;64,64", "64,64", {"task_type": "AI_CORE"}),
        ]
    chain(b, 0, ops)
    return b.build()


def optimizer(per_param: bool = True, annotated: bool = True) -> Profile:
    b = base()
    if annotated:
        b.event("annotation", "Optimizer.step#SGD.step", 0, 60_000)
    if per_param:
        ops = [("aten::add_", f"{i + 10};{i + 10}", f"{i + 10}", {}) for i in range(25)]
    else:
        ops = [("aten::_foreach_add_", "10;11;12", "10", {})]
    chain(b, 0, ops)
    return b.build()


def fp32_matmul(dtype: str = "float32", device: str = "ascend910b") -> Profile:
    b = Builder(device=device).step(0, 0, 1_000_000)  # 2 x 4096^3 FLOPs: ~0.9 ms in fp32
    b.op(
        "aten::mm",
        0,
        1000,
        [
            dict(
                start=1000,
                end=925_000,
                op_type="MatMul",
                task_type="AI_CORE",
                input_shapes="4096,4096;4096,4096",
                input_dtypes=f"{dtype};{dtype}",
                flops=2 * 4096**3,
                bytes=3 * 4096 * 4096 * 4,
            )
        ],
        input_shapes="4096,4096;4096,4096",
        input_dtypes=f"{dtype};{dtype}",
    )
    b.event("sync", "aclrtSynchronizeDevice", 1000, 925_000)  # the host waits for the device
    return b.build()


def amp_in_use(costly: bool = True) -> Profile:
    """A bf16 matmul step whose casts (and a GradScaler's unscale) cost more than the matmul
    saves against fp32 (``costly``), or one big bf16 matmul and one small cast."""
    b = Builder().step(0, 0, 1_000_000)
    n = 1024 if costly else 4096
    cast_end = 31_000 if costly else 2_000
    b.op(
        "aten::copy_",
        0,
        1000,
        [dict(start=1000, end=cast_end, op_type="Cast", input_shapes="", input_dtypes="")],
        input_shapes="1024,1024;1024,1024",
        input_dtypes="float32;bfloat16",
    )
    shape = f"{n},{n};{n},{n}"
    b.op(
        "aten::mm",
        1000,
        2000,
        [
            dict(
                start=cast_end,
                end=cast_end + (5_000 if costly else 460_000),
                op_type="MatMul",
                task_type="AI_CORE",
                input_shapes=shape,
                input_dtypes="bfloat16;bfloat16",
                flops=2 * n**3,
            )
        ],
        input_shapes=shape,
        input_dtypes="bfloat16;bfloat16",
    )
    if costly:
        b.op(
            "aten::_amp_foreach_non_finite_check_and_unscale_",
            2000,
            3000,
            [dict(start=40_000, end=50_000, input_dtypes="float32;float32")],
            input_dtypes="float32;float32",
        )
    return b.build()


def transdata(present: bool = True, conv_us: int = 0) -> Profile:
    """A TransData of 5 us per step; ``conv_us`` of the step's busy time are a Conv2D."""
    b = busy(base(), end=STEP - conv_us * 1000)
    if conv_us:
        b.op(
            "aten::convolution",
            2000,
            2100,
            [dict(start=STEP - conv_us * 1000, end=STEP, op_type="Conv2D", task_type="AI_CORE")],
        )
    if present:
        b.op(
            "aten::mean",
            0,
            100,
            [
                dict(
                    start=0,
                    end=5000,
                    op_type="TransData",
                    input_formats="NC1HWC0",
                    output_formats="ND",
                    bytes=10**6,
                )
            ],
        )
    return b.build()


def aicpu(present: bool = True) -> Profile:
    """An int64 AI CPU task, then (same stream, launched early) the step's long kernel: the
    AI CPU task is on the critical path, so running it on the AI Core shortens the step."""
    if not present:
        return busy(base()).build()
    b = base()
    add = dict(start=0, end=30_005, op_type="Add", task_type="AI_CPU", bytes=16)
    b.op("aten::add_", 0, 100, [add | dict(input_dtypes="int64", output_dtypes="int64")])
    mm = dict(start=30_005, end=STEP, op_type="MatMul", task_type="AI_CORE", launch_ns=1_200)
    b.op("aten::mm", 200, 1_200, [mm | dict(input_dtypes="float16;float16", flops=1e9)])
    return b.build()


def dispatch(host_bound: bool = True) -> Profile:
    """Short kernels; host-bound: each issued 10 us after the previous one ended."""
    b = base()
    gap = 10_000 if host_bound else 0
    t = 0
    for _ in range(8):
        b.op("aten::add", t, t + 1000 + gap, [dict(start=t + 1000 + gap, end=t + 4000 + gap)])
        b.event("launch", "aten::add", t + gap, t + 1000 + gap, task_id=len(b.tasks) - 1)
        t += 3000 + gap
    b.steps[0]["end_ns"] = t + 1000
    return b.build()


def dynamic(compiles: bool = True) -> Profile:
    """Two steps, each a MatMul on a new shape compiled online for 4 us (4% of the step)."""
    b = base().step(1, STEP, 2 * STEP)
    for step in (0, 1):
        t = step * STEP
        b.op(
            "aten::mm",
            t,
            t + 1000,
            [dict(start=t + 5000, end=t + STEP, op_type="MatMul", input_shapes=f"{8 + step},16")],
            step=step,
        )
        name = "compile MatMul" if compiles else "compile graph_0"  # graph_0: a graph compile
        b.event("api", name, t + 1000, t + 5000, step=step)
    return b.build()


CODE = "forward (model.py:12)"


def storm(compiles: int = 6, code: str = CODE, limit: int = 8) -> Profile:
    """One code object compiled ``compiles`` times, a graph per compile, each compile a
    2 ms host span inside the step before its graph's call."""
    b = Builder().step(0, 0, compiles * 3_000_000)
    t = 0
    for i in range(compiles):
        graph = f"graph{i}_forward"
        b.event("api", f"compile {graph}", t, t + 2_000_000)
        b.graph_plan(
            graph, compile_ns=2_000_000, code=code, compiles=i + 1, recompile_limit=limit,
            time_ns=t + 2_000_000, kernels=1,
        )  # fmt: skip
        t += 2_000_000
        b.graph_call(graph, t, t + 10_000, [dict(start=t + 10_000, end=t + 900_000)])
        t += 1_000_000
    return b.build()


def copies(exposed: bool = True) -> Profile:
    b = base()
    if exposed:
        b.task(
            0,
            30_000,
            kind="memcpy",
            task_type="DMA",
            copy_kind="HOST_TO_DEVICE",
            bytes=300_000,
            pinned=False,
            op_type="MEMCPY_H2D",
        )
        busy(b, 30_000, STEP)
    else:
        busy(b)
        b.task(
            10_000,
            40_000,
            kind="memcpy",
            task_type="DMA",
            copy_kind="HOST_TO_DEVICE",
            bytes=3_000_000,
            pinned=True,
            stream_id=1,
        )
    return b.build()


def small(count: int = 25) -> Profile:
    b = busy(Builder().step(0, 0, 1_000_000), 0, 1_000_000)
    for i in range(count):  # pageable: 25 us of latency each
        b.task(
            30_000 * i,
            30_000 * i + 25_000,
            kind="memcpy",
            task_type="DMA",
            stream_id=1,
            copy_kind="HOST_TO_DEVICE",
            bytes=256,
            pinned=False,
        )
    return b.build()


def syncs(present: bool = True) -> Profile:
    b = base()
    b.op("aten::mm", 0, 1000, [dict(start=1000, end=20_000, op_type="MatMul", task_type="AI_CORE")])
    if present:
        b.event("sync", "aclrtSynchronizeDevice", 1000, 40_000)
    b.op(
        "aten::mm",
        40_000,
        41_000,
        [dict(start=41_000, end=STEP, op_type="MatMul", task_type="AI_CORE")],
    )
    if not present:
        b.tasks[0]["end_ns"] = 41_000
    return b.build()


def utilisation(low: bool = True) -> Profile:
    b = base()
    end = 10_000 if low else 90_000
    b.op(
        "aten::copy_",
        0,
        100,
        [
            dict(
                start=0,
                end=100,
                kind="memcpy",
                copy_kind="HOST_TO_DEVICE",
                bytes=32 * 1024,
                task_type="DMA",
            )
        ],
        input_shapes="32,256;32,256",
        input_dtypes="float32;float32",
    )
    busy(b, 100, end)
    b.mem(10, GIB, 2 * GIB)
    b.mem(5000, 2 * GIB, 2 * GIB)
    return b.build()


def near_capacity(near: bool = True) -> Profile:
    from msprof_py.device.spec import DeviceSpec

    usable = DeviceSpec.load("ascend910b").memory.usable_bytes
    b = busy(base())
    b.mem(10, GIB, int(usable * (0.95 if near else 0.2)))
    return b.build()


def dataloader(slow: bool = True, host_time: str = "measured") -> Profile:
    b = base(host_time=host_time)
    length = 40_000 if slow else 0
    b.event(
        "annotation", "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", 0, length
    )
    busy(b, length, STEP)  # the first op comes when the batch is there
    return b.build()


def communication(exposed: bool = True, collectives: bool = True) -> Profile:
    b = base()
    busy(b, 0, 50_000)
    if collectives:
        start = 50_000 if exposed else 10_000
        b.task(
            start,
            start + 30_000,
            kind="collective",
            task_type="HCCL",
            stream_id=1,
            collective="allreduce",
            algorithm="mesh",
            world_size=2,
            bytes=10**7,
        )
    return b.build()


def ranks(slow: bool = True, count: int = 2) -> Profile:
    builders = []
    for r in range(count):
        b = Builder(rank=r).step(0, 0, STEP + (30_000 if slow and r == 1 else 0))
        busy(b, 0, 50_000 + (30_000 if slow and r == 1 else 0))
        builders.append(b)
    return cluster(*builders) if count > 1 else builders[0].build()


def quantized(on_host: bool = True) -> Profile:
    """A dynamic-quantized Linear on the host: D2H copy, CPU compute, H2D copy (35 us of a
    100 us step); without: an int8 matmul kernel on the device."""
    b = busy(base(), 40_000, STEP)
    if not on_host:
        b.op("torch_npu.npu_quant_matmul", 0, 1000, [dict(start=1000, end=5000)])
        return b.build()
    copy = dict(kind="memcpy", task_type="DMA", pinned=False)
    b.op(
        "quantized::linear_dynamic",
        0,
        35_000,
        [
            dict(start=1000, end=11_000, copy_kind="DEVICE_TO_HOST", bytes=32 * 256 * 4, **copy),
            dict(start=25_000, end=35_000, copy_kind="HOST_TO_DEVICE", bytes=32 * 512 * 4, **copy),
        ],
        input_shapes="32,256",
        module="Model/Linear",
    )
    b.event("python", "quantized::linear_dynamic (host)", 12_000, 24_000)
    return b.build()


def tasks_only() -> Profile:
    b = base()
    b.task(0, 1000)
    return b.build()


def no_tasks() -> Profile:
    return base().build()


def unlinked() -> Profile:
    p = conv_chain()
    p.tables["tasks"]["host_op_id"] = -1
    return p


CASES: dict[
    str, tuple[Callable[[], Profile], Callable[[], Profile], Callable[[], Profile], str]
] = {
    "fusion_conv_bn_relu": (conv_chain, lambda: conv_chain(False), tasks_only, "no host ops"),
    "fusion_matmul_epilogue": (matmul_gelu, lambda: matmul_gelu(True), unlinked, "not linked"),
    "fusion_attention": (attention, lambda: attention(False), no_tasks, "no device tasks"),
    "fusion_norm_chain": (layernorm, lambda: layernorm(False), tasks_only, "no host ops"),
    "fusion_softmax_chain": (softmax, lambda: softmax(False), tasks_only, "no host ops"),
    "fusion_gelu_chain": (gelu, lambda: gelu(False), tasks_only, "no host ops"),
    "fusion_elementwise_chain": (elementwise, lambda: elementwise(1), tasks_only, "no host ops"),
    "fused_optimizer": (
        optimizer,
        lambda: optimizer(False),
        lambda: optimizer(annotated=False),
        "Optimizer.step",
    ),
    "amp_fp32_cube": (
        fp32_matmul,
        lambda: fp32_matmul("float16"),
        lambda: fp32_matmul(device="no-such-npu"),
        "no-such-npu",
    ),
    "amp_overhead": (amp_in_use, lambda: amp_in_use(False), tasks_only, "no host ops"),
    "transdata_heavy": (transdata, lambda: transdata(False), no_tasks, "no device tasks"),
    "aicpu_fallback": (aicpu, lambda: aicpu(False), no_tasks, "no device tasks"),
    "quantized_on_host": (quantized, lambda: quantized(False), tasks_only, "no host ops"),
    "host_bound_dispatch": (dispatch, lambda: dispatch(False), tasks_only, "no host ops"),
    "dynamic_shapes": (dynamic, lambda: dynamic(False), tasks_only, "no runtime API"),
    "recompile_storm": (
        storm,
        lambda: storm(2),
        lambda: storm(4, code=""),
        "name no code object",
    ),
    "exposed_copies": (copies, lambda: copies(False), no_tasks, "no device tasks"),
    "small_copies": (small, lambda: small(1), no_tasks, "no device tasks"),
    "sync_in_loop": (syncs, lambda: syncs(False), tasks_only, "no host ops"),
    "low_utilisation": (utilisation, lambda: utilisation(False), no_tasks, "no device tasks"),
    "memory_near_capacity": (
        near_capacity,
        lambda: near_capacity(False),
        tasks_only,
        "no memory events",
    ),
    "slow_dataloader": (
        dataloader,
        lambda: dataloader(False),
        lambda: dataloader(False, host_time="modeled"),
        "host time is modelled",
    ),
    "exposed_communication": (
        communication,
        lambda: communication(False),
        lambda: communication(collectives=False),
        "no collective",
    ),
    "slow_rank": (ranks, lambda: ranks(False), lambda: ranks(count=1), "one rank only"),
}


def test_every_rule_has_cases() -> None:
    assert set(CASES) == set(rule_specs()) == set(engine.RULES)


@pytest.mark.parametrize("rule", list(CASES))
def test_rule_fires(rule: str) -> None:
    f = check(CASES[rule][0](), rule)
    assert f.status == FIRED, f.message
    assert f.priority in ("high", "medium", "low")
    assert f.gain_model in ("modelled", "heuristic", None)
    assert f.estimated_gain_us is None or f.estimated_gain_us >= 0
    if rule != "memory_near_capacity":
        assert f.estimated_gain_us is not None and f.estimated_gain_us > 0
    assert "{" not in f.message and "{" not in f.advice


@pytest.mark.parametrize("rule", list(CASES))
def test_rule_does_not_fire(rule: str) -> None:
    f = check(CASES[rule][1](), rule)
    assert f.status == OK, f.message
    assert f.priority is None and f.estimated_gain_us is None


@pytest.mark.parametrize("rule", list(CASES))
def test_rule_skipped_names_the_missing_data(rule: str) -> None:
    f = check(CASES[rule][2](), rule)
    assert f.status == SKIPPED, f.message
    assert f.message.startswith("SKIPPED: ")
    assert CASES[rule][3] in f.message
    assert "internal error" not in f.message


def test_priority_levels_follow_the_share_of_step() -> None:
    spec = rule_specs()["exposed_copies"]
    assert (spec.priority(0.05), spec.priority(0.049), spec.priority(0.03)) == (
        "high",
        "medium",
        "medium",
    )
    assert spec.priority(0.029) == "low"


def test_a_broken_rule_is_skipped_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(ctx, spec):
        raise ZeroDivisionError("boom")

    monkeypatch.setitem(engine.RULES, "small_copies", broken)
    f = check(small(), "small_copies")
    assert f.status == SKIPPED and "internal error: ZeroDivisionError: boom" in f.message


def test_fusion_gain_is_modelled_and_matches_the_recost() -> None:
    from msprof_py.analyzers import recost

    profile = conv_chain()
    f = check(profile, "fusion_conv_bn_relu")
    saved = recost.fusion(context.prepare(profile, 0, warmup=0))["saved_ns"].sum()
    assert f.gain_model == "modelled"
    assert f.estimated_gain_us == pytest.approx(saved / 1e3, abs=1e-3)
    assert f.evidence["launches_saved_per_step"] == 2


def test_exposed_copy_gain_moves_the_copy_under_compute() -> None:
    from msprof_py.device import costmodel
    from msprof_py.device.records import CopyKind
    from msprof_py.device.spec import DeviceSpec

    f = check(copies(), "exposed_copies")
    pinned = costmodel.copy_ns(DeviceSpec.load("ascend910b"), CopyKind.H2D, 300_000)
    assert pinned < 70_000  # fits under the step's compute: all 30 us are saved
    assert f.estimated_gain_us == pytest.approx(30.0)


def test_recompile_storm_counts_the_code_object_and_its_compile_time() -> None:
    f = check(storm(6), "recompile_storm")
    assert f.status == FIRED
    assert f.evidence["compiles"] == 6 and f.evidence["recompiles"] == 5
    assert f.evidence["limit_reached"] is False and "2 below the recompile limit" in f.message
    # six 2 ms compile spans in one 18 ms step
    assert f.evidence["compile_in_steps_ms"] == pytest.approx(12.0)
    assert f.share == pytest.approx(12 / 18)
    assert f.estimated_gain_us == pytest.approx(12_000)
    assert f.evidence["code_objects"][0] == {
        "code": CODE, "compiles": 6, "limit": 8, "graphs": 6, "example_graph": "graph5_forward",
    }  # fmt: skip


def test_recompile_storm_at_the_limit_says_eager_fallback() -> None:
    f = check(storm(8), "recompile_storm")
    assert f.status == FIRED and f.evidence["limit_reached"] is True
    assert "reached the recompile limit (8)" in f.message and "eagerly" in f.message
    ok = check(storm(3, limit=3), "recompile_storm")  # 2 recompiles, but at its limit
    assert ok.status == FIRED and ok.evidence["limit_reached"] is True


def test_recompile_storm_skipped_without_graphs() -> None:
    f = check(dispatch(), "recompile_storm")
    assert f.status == SKIPPED and "graph mode did not run" in f.message


def test_sync_in_loop_counts_the_value_reads_copies() -> None:
    """An ``.item()`` after the sync queues an 8-byte copy (3 us): the gain is the idle time
    after the syncs plus that copy, which goes with the read when it is deferred."""
    b = base()
    b.op("aten::mm", 0, 1000, [dict(start=1000, end=20_000, op_type="MatMul", task_type="AI_CORE")])
    b.event("sync", "aclrtSynchronizeDevice", 1000, 20_000)
    item = b.op(
        "aten::_local_scalar_dense",
        20_000,
        24_000,
        [
            dict(
                start=21_000,
                end=24_000,
                kind="memcpy",
                copy_kind="DEVICE_TO_HOST",
                bytes=8,
                pinned=False,
                name="Tensor.item() (aten::_local_scalar_dense) (value)",
            )
        ],
    )
    b.event(
        "sync", "Tensor.item() (aten::_local_scalar_dense) (value) (wait)", 20_000, 24_000,
        parent_id=item,
    )  # fmt: skip
    b.op("aten::mm", 40_000, 41_000, [dict(start=41_000, end=STEP, op_type="MatMul")])
    f = check(b.build(), "sync_in_loop")
    assert f.status == FIRED, f.message
    assert f.evidence["value_read_copy_us_per_step"] == pytest.approx(3.0)
    idle = f.evidence["idle_us_per_step"]
    assert idle > 0
    assert f.estimated_gain_us == pytest.approx(idle + 3.0)
    assert f.evidence["apply"] == {"sync": "defer"}


def _image_loader(device: str = "ascend910b", shape: str = "8,3,224,224", dvpp: bool = False):
    b = base(host_time="measured", device=device)
    b.event(
        "annotation", "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", 0, 40_000
    )
    b.task(40_000, 41_000, kind="memcpy", task_type="DMA", copy_kind="HOST_TO_DEVICE",
           op_type="MEMCPY_H2D", output_shapes=shape, input_shapes=shape)  # fmt: skip
    if dvpp:
        b.task(0, 1000, kind="dvpp", task_type="DVPP", op_type="JPEGD")
    busy(b, 41_000, STEP)
    return b.build()


def test_a_slow_image_loader_is_pointed_at_dvpp_where_the_chip_has_it() -> None:
    # 8 images of 32 x 32 on ascend910b (JPEGD 16 x 128 FPS, VPC 12 x 360 FPS per channel at
    # 1080p): each engine spreads the batch over 8 channels
    f = check(_image_loader(shape="8,3,32,32"), "slow_dataloader")
    assert f.status == FIRED
    assert f.evidence["image_batch"] == "8x3x32x32" and f.evidence["device_has_dvpp"]
    assert 'torchvision_npu.set_image_backend("npu")' in f.advice
    m = f.evidence["dvpp_model"]
    jpegd = 8 * 32 * 32 * 1e9 / (8 * 128 * 1920 * 1080) / 1e3  # 3.858 us
    vpc = 8 * 32 * 32 * 1e9 / (8 * 360 * 1920 * 1080) / 1e3  # 1.372 us
    assert m["jpegd_us"] == pytest.approx(jpegd, abs=1e-3)
    assert m["vpc_us"] == pytest.approx(vpc, abs=1e-3)
    # the device idles through the whole 40 us loading range: nothing hides the DVPP time
    assert m["wait_removed_us"] == pytest.approx(40.0)
    assert m["not_hidden_us"] == pytest.approx(jpegd + vpc, abs=2e-3)
    assert m["gain_us"] == pytest.approx(40.0 - jpegd - vpc, abs=2e-3)
    assert f"a modelled gain of {40.0 - jpegd - vpc:.1f} us per step" in f.advice


def test_a_recorded_copy_takes_its_image_shape_from_its_host_op() -> None:
    """Recorded copy tasks carry no shapes; the aten::copy_ that launched one does."""
    b = base(host_time="measured")
    b.event("annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 40_000)
    copy = dict(start=40_000, end=41_000, kind="memcpy", task_type="DMA",
                copy_kind="HOST_TO_DEVICE", op_type="MEMCPY_H2D")  # fmt: skip
    b.op("aten::copy_", 40_000, 40_500, [copy], input_shapes="8,3,32,32;8,3,32,32")
    busy(b, 41_000, STEP)
    f = check(b.build(), "slow_dataloader")
    assert f.evidence["image_batch"] == "8x3x32x32"
    assert f.evidence["dvpp_model"]["gain_us"] > 0


def test_no_dvpp_advice_where_it_would_not_pay_or_cannot_run() -> None:
    # 224 x 224 images take 189.0 + 67.2 us of DVPP, more than the 40 us wait: no gain
    big = check(_image_loader(), "slow_dataloader")
    assert big.evidence["dvpp_model"]["dvpp_us"] == pytest.approx(
        8 * 224 * 224 * 1e9 / (8 * 1920 * 1080) * (1 / 128 + 1 / 360) / 1e3, abs=2e-3
    )
    assert big.evidence["dvpp_model"]["gain_us"] == 0.0
    assert "no gain modelled" in big.advice and "set_image_backend" not in big.advice
    # not an image batch (2-D features), DVPP already used, or no DVPP on the chip
    assert "DVPP" not in check(_image_loader(shape="8,1024"), "slow_dataloader").advice
    used = check(_image_loader(dvpp=True), "slow_dataloader")
    assert "DVPP" not in used.advice and "dvpp_model" not in used.evidence
    # the DVPP use is reported: one 1 us JPEGD task in the one step
    assert used.evidence["dvpp_ops"] == {"JPEGD": 1}
    assert used.evidence["dvpp_us_per_step"] == pytest.approx(1.0)
    assert "The steps used DVPP (JPEGD 1): 1.0 us of DVPP time per step" in used.message
    on_910a = check(_image_loader(device="ascend910a"), "slow_dataloader")
    assert "no DVPP decoder modelled" in on_910a.advice
    assert "set_image_backend" not in on_910a.advice
    assert "dvpp_model" not in on_910a.evidence


def test_transdata_advice_turns_formats_off_only_where_convolutions_are_a_small_part() -> None:
    light = check(transdata(conv_us=49), "transdata_heavy")  # 49% of the step: mostly not
    assert light.status == FIRED and light.evidence["apply"] == {"internal_format": False}
    assert light.evidence["conv_share"] == pytest.approx(0.49)
    assert "allow_internal_format = False" in light.advice
    heavy = check(transdata(conv_us=51), "transdata_heavy")
    assert heavy.status == FIRED and "apply" not in heavy.evidence
    assert heavy.evidence["conv_share"] == pytest.approx(0.51)
    assert "Keep tensors in one format" in heavy.advice and "51.0%" in heavy.message
