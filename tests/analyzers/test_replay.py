"""The replay of recorded launches and syncs (msprof_py.analyzers.replay) on hand-built
timelines that follow the simulator's dispatch model: answers computed by hand."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest
from analyze_helpers import Builder

from msprof_py.analyzers import context, engine, gains, render, replay
from msprof_py.analyzers.rules_compute import RuleContext
from msprof_py.profile import Profile
from msprof_py.report import build

US = 1000
STAGE1, STAGE2, SYNC = 6 * US, 10 * US, 5 * US  # the 910B preset's dispatch costs


def end_step(b: Builder, step: int, step_start: int, host: int, tail: int) -> int:
    """The step's closing device synchronize (after the host and the last task); its end."""
    sync_end = max(host, tail) + SYNC
    b.event("sync", "aclrtSynchronizeDevice", host, sync_end, step=step)
    b.step(step, step_start, sync_end)
    return sync_end


def pipeline(
    kernel_us: int, kernels: int = 3, steps: int = 3, middle: str = "Add", held_us: int = 0
) -> Profile:
    """``steps`` steps of ``kernels`` kernels of ``kernel_us`` each, launched back to back
    (host stage 1, then the launch pipeline's stage 2), and a device synchronize at the end
    of each step, built as the engine schedules them; the middle kernel's op type is
    ``middle``; the last kernel starts ``held_us`` after it could (held by another stream)."""
    b = Builder()
    host = 0
    arrival = 0
    tail = 0
    for s in range(steps):
        step_start = host
        for k in range(kernels):
            h_end = host + STAGE1
            arrival = max(h_end, arrival) + STAGE2
            start = max(arrival, tail) + (held_us * US if k == kernels - 1 else 0)
            wait = start - tail if tail else 0
            tail = start + kernel_us * US
            op_type = middle if k == kernels // 2 else "Add"
            formats = (
                {"input_formats": "NC1HWC0", "output_formats": "ND"} if op_type != "Add" else {}
            )
            tid = b.task(
                start, tail, launch_ns=arrival, wait_ns=wait, step=s, op_type=op_type, **formats
            )
            b.event("launch", "aten::add", host, h_end, task_id=tid, step=s)
            host = h_end
        host = end_step(b, s, step_start, host, tail)
    return b.build()


def data(profile: Profile) -> context.RankData:
    return context.prepare(profile, 0, warmup=1)


@pytest.mark.parametrize("kernel_us", [3, 30])
def test_replay_without_a_change_gives_the_recorded_steps(kernel_us: int) -> None:
    d = data(pipeline(kernel_us))
    recorded, replayed = replay.check_ns(d)
    # 3 us kernels: arrivals 16/26/36 us after the step's start, last end 39, sync 44;
    # 30 us kernels: ends 46/76/106, sync 111
    assert recorded == pytest.approx({3: 44, 30: 111}[kernel_us] * US)
    assert replayed == pytest.approx(recorded)


def test_a_launch_bound_step_gains_the_pipeline_slot_not_the_kernel() -> None:
    d = data(pipeline(3))
    middle = d.all_tasks.loc[d.all_tasks["task_id"] % 3 == 1, "task_id"]
    # the last kernel now arrives at 26 us, ends at 29, the sync returns at 34: 10 us saved
    assert replay.gain_ns(d, middle) == pytest.approx(10 * US)


def test_a_device_bound_step_gains_the_kernel() -> None:
    d = data(pipeline(30))
    middle = d.all_tasks.loc[d.all_tasks["task_id"] % 3 == 1, "task_id"]
    # the last kernel follows the first (ends 46 -> 76), the sync returns at 81: 30 us saved
    assert replay.gain_ns(d, middle) == pytest.approx(30 * US)
    shorter = d.all_tasks.set_index("task_id")["duration_ns"].iloc[:0]
    assert replay.gain_ns(d, (), shorter) == 0.0


def test_transdata_heavy_estimates_the_replayed_gain_of_a_launch_bound_step() -> None:
    """The TransData runs 3 us, but in a launch-bound step its launch-pipeline slot (10 us)
    is what the step loses; the estimate used to be the 3 us of device time."""
    d = data(pipeline(3, middle="TransData"))
    found = engine.run_rule("transdata_heavy", RuleContext(d, {0: d}, None))
    assert found.status == "fired"
    assert found.evidence["device_us_per_step"] == pytest.approx(3.0)
    assert found.estimated_gain_us == pytest.approx(10.0)


def dispatch(profile: Profile):
    d = data(profile)
    return engine.run_rule("host_bound_dispatch", RuleContext(d, {0: d}, None))


def test_host_bound_dispatch_names_the_launch_pipeline_when_it_sets_the_arrival_rate() -> None:
    found = dispatch(pipeline(3))
    assert found.status == "fired"
    ev = found.evidence
    # per step: 3 launches of 10 us in stage 2; the host thread runs 18 us (3 x 6 us of
    # stage 1) and waits in the sync for the rest of the 44 us step
    assert ev["launch_pipeline_us_per_step"] == pytest.approx(30.0)
    assert ev["host_thread_us_per_step"] == pytest.approx(18.0)
    assert ev["limiter"] == "launch pipeline"
    assert "faster Python code does not" in found.message


def test_host_bound_dispatch_leaves_out_gaps_whose_next_task_had_arrived() -> None:
    """The last kernel arrives 36 us into the step but another stream holds it 200 us: the
    device waits 7 + 7 us for launches (19 -> 26, 29 -> 36) and 200 us for the other stream,
    which is not host-bound dispatch (it used to count all 214 us of the 244 us step)."""
    found = dispatch(pipeline(3, held_us=200))
    assert found.evidence["arrived_idle_us"] == pytest.approx(200.0)
    assert found.status == "ok"


#: a Conv+BN+ReLU chain on the dataflow (tiny tensors: the fused kernel's HBM term is
#: under a nanosecond), as (op, input shapes, output shape, task columns)
CONV_BN_RELU = [
    ("aten::convolution_overrideable", "1,1,4,4;1,1,1,1", "1,1,4,4",
     {"op_type": "Conv2D", "task_type": "AI_CORE"}),
    ("aten::native_batch_norm", "1,1,4,4;1;1;1;1", "1,1,4,4", {"op_type": "BNTrainingUpdate"}),
    ("aten::relu_", "1,1,4,4", "1,1,4,4", {"op_type": "Relu"}),
]  # fmt: skip


def conv_pipeline(
    kernel_us: int,
    steps: int = 3,
    ops: list[tuple[str, str, str, dict]] = CONV_BN_RELU,
    sequences: list[int] | None = None,
) -> Profile:
    """:func:`pipeline`'s steps with their kernels launched by a chain of host ops (one
    launch each; a Conv+BN+ReLU chain unless ``ops`` says otherwise; ``sequences``: each
    op's autograd sequence number)."""
    b = Builder()
    host = arrival = tail = 0
    for s in range(steps):
        step_start = host
        for i, (name, ins, out, cols) in enumerate(ops):
            h_end = host + STAGE1
            arrival = max(h_end, arrival) + STAGE2
            start = max(arrival, tail)
            wait = start - tail if tail else 0
            tail = start + kernel_us * US
            dtypes = ";".join(["float32"] * len(ins.split(";")))
            seq = {"sequence": sequences[i]} if sequences else {}
            op = b.event(
                "op", name, host, h_end, step=s, input_shapes=ins, input_dtypes=dtypes, **seq
            )
            tid = b.task(
                start, tail, launch_ns=arrival, wait_ns=wait, step=s, host_op_id=op,
                name=name, output_shapes=out, output_dtypes="float32", **cols,
            )  # fmt: skip
            b.event("launch", name, host, h_end, task_id=tid, parent_id=op, step=s)
            host = h_end
        host = end_step(b, s, step_start, host, tail)
    return b.build()


@pytest.mark.parametrize(("kernel_us", "gain_us"), [(3, 20), (30, 60)])
def test_fusion_conv_bn_relu_estimates_the_replayed_gain(kernel_us: int, gain_us: int) -> None:
    """The fused chain is the convolution's kernel alone (zero-byte BN and ReLU, no HBM
    traffic left to add): 3 us kernels, launch-bound (arrivals 16/26/36 us, sync 44): the
    conv ends at 19, the sync returns at 24, 20 us saved (two pipeline slots) where the
    device time saved is 6 us; 30 us kernels, device-bound (ends 46/76/106, sync 111): the
    conv ends at 46, the sync returns at 51, 60 us saved, the two kernels' device time."""
    d = data(conv_pipeline(kernel_us))
    assert replay.check_ns(d)[1] == pytest.approx({3: 44, 30: 111}[kernel_us] * US)
    found = engine.run_rule("fusion_conv_bn_relu", RuleContext(d, {0: d}, None))
    assert found.status == "fired", found.message
    assert found.evidence["replayed"] is True
    assert found.evidence["device_saved_us_per_step"] == pytest.approx(2 * kernel_us, abs=1e-3)
    assert found.estimated_gain_us == pytest.approx(gain_us, abs=1e-3)


#: chains of the other fusion rules (tiny tensors, no flops recorded: a vector chain's fused
#: kernel is the 3 us of device scheduling; a cube chain's, its matmul's kernel)
X, R = "2,8", "2,1"
MATMUL = ("aten::mm", "2,2;2,2", "2,2", {"task_type": "AI_CORE", "op_type": "MatMul"})


def _ew(x: str) -> list[tuple[str, str, str, dict]]:
    return [("aten::add", f"{x};{x}", x, {}), ("aten::mul", x, x, {}), ("aten::sigmoid", x, x, {})]


CHAINS = {
    "fusion_matmul_epilogue": [
        ("aten::addmm", "4;2,2;2,4", "2,4", {"task_type": "AI_CORE", "op_type": "MatMulV2"}),
        ("aten::gelu", "2,4", "2,4", {"op_type": "Gelu"}),
    ],
    "fusion_norm_chain": [
        ("aten::mean", X, R, {}), ("aten::sub", f"{X};{R}", X, {}), ("aten::pow", X, X, {}),
        ("aten::mean", X, R, {}), ("aten::add", R, R, {}), ("aten::rsqrt", R, R, {}),
        ("aten::mul", f"{X};{R}", X, {}),
    ],
    "fusion_softmax_chain": [
        ("aten::amax", X, R, {}), ("aten::sub", f"{X};{R}", X, {}), ("aten::exp", X, X, {}),
        ("aten::sum", X, R, {}), ("aten::div", f"{X};{R}", X, {}),
    ],
    "fusion_gelu_chain": [
        ("aten::div", X, X, {}), ("aten::erf", X, X, {}), ("aten::add", X, X, {}),
        ("aten::mul", f"{X};{X}", X, {}), ("aten::mul", X, X, {}),
    ],
    # two chains per step (the rule's threshold), each followed by a matmul
    "fusion_elementwise_chain": [*_ew("5"), MATMUL, *_ew("6"), MATMUL],
}  # fmt: skip


@pytest.mark.parametrize(
    ("rule", "kernel_us", "gain_us", "saved_us"),
    [
        # addmm + gelu: 16-19 (+ 26-29), sync 34 -> 16-19, sync 24; 16-46, 46-76, sync 81 ->
        # sync 51; the fused kernel is the addmm's
        ("fusion_matmul_epilogue", 3, 10, 3),
        ("fusion_matmul_epilogue", 30, 30, 30),
        # 7 kernels, the last arriving at 76 (ends 79, sync 84) or ending at 226 (sync 231);
        # fused: 16-19, sync 24
        ("fusion_norm_chain", 3, 60, 18),
        ("fusion_norm_chain", 30, 207, 207),
        # 5 kernels: sync 64 or 171 -> 24
        ("fusion_softmax_chain", 3, 40, 12),
        ("fusion_softmax_chain", 30, 147, 147),
        ("fusion_gelu_chain", 3, 40, 12),
        ("fusion_gelu_chain", 30, 147, 147),
        # 8 kernels (sync 94 or 261) -> fused 16-19, mm 26-29 or 26-56, fused 36-39 or
        # 56-59, mm 46-49 or 59-89, sync 54 or 94: device-bound, the second fused kernel
        # waits for the matmul and the first matmul's arrival is exposed (167 < 174 saved)
        ("fusion_elementwise_chain", 3, 40, 12),
        ("fusion_elementwise_chain", 30, 167, 174),
    ],
)
def test_every_fusion_rule_estimates_the_replayed_gain(
    rule: str, kernel_us: int, gain_us: int, saved_us: int
) -> None:
    """Each chain replayed as one kernel at its fused duration, its other kernels and their
    launches gone (the answers by hand on :func:`conv_pipeline`'s timelines); the device
    time saved stays in the evidence; the change joins the joint estimate."""
    d = data(conv_pipeline(kernel_us, ops=CHAINS[rule]))
    found = engine.run_rule(rule, RuleContext(d, {0: d}, None))
    assert found.status == "fired", found.message
    assert found.evidence["replayed"] is True
    assert found.evidence["device_saved_us_per_step"] == pytest.approx(saved_us, abs=1e-3)
    assert found.estimated_gain_us == pytest.approx(gain_us, abs=1e-3)
    assert gains.joint(d, [found])["gain_us"] == pytest.approx(gain_us, abs=1e-3)


#: a forward attention (bmm, scale, softmax, bmm on the dataflow; no backward recorded)
ATTENTION = [
    ("aten::bmm", "4,8,2;4,2,8", "4,8,8", {"task_type": "AI_CORE", "op_type": "BatchMatMul"}),
    ("aten::div", "1,4,8,8", "1,4,8,8", {}),
    ("aten::_softmax", "1,4,8,8", "1,4,8,8", {"op_type": "SoftmaxV2"}),
    ("aten::bmm", "4,8,8;4,8,2", "4,8,2", {"task_type": "AI_CORE", "op_type": "BatchMatMul"}),
]


@pytest.mark.parametrize(("kernel_us", "before_us"), [(3, 33), (30, 120)])
def test_fusion_attention_estimates_the_replayed_gain(kernel_us: int, before_us: int) -> None:
    """Four kernels: the last arrives at 46 (ends 49, sync 54; launch-bound) or ends at 136
    (sync 141; device-bound). As npu_fusion_attention: one FlashAttentionScore of F us (the
    cost model's) at 16, sync at 21 + F: 33 - F or 120 - F us saved. The device time saved
    (4 x kernel - F) and the host-and-device estimate stay in the evidence."""
    from msprof_py.analyzers import recost

    d = data(conv_pipeline(kernel_us, ops=ATTENTION))
    found = engine.run_rule("fusion_attention", RuleContext(d, {0: d}, None))
    assert found.status == "fired", found.message
    (fused,) = set(recost.attention(d)["fused_forward_ns"] / US)
    assert 0 < fused < 9
    assert found.evidence["replayed"] is True
    saved = found.evidence["device_saved_us_per_step"]
    assert saved == pytest.approx(4 * kernel_us - fused, abs=1e-3)
    assert found.estimated_gain_us == pytest.approx(before_us - fused, abs=1e-3)
    assert gains.joint(d, [found])["rules"] == ["fusion_attention"]


#: the attention's backward: the ops autograd runs in the forward ops' nodes (sequence - 1)
ATTENTION_BACKWARD = [
    ("aten::bmm", "4,8,8;4,8,2", "4,8,2", {"task_type": "AI_CORE", "op_type": "BatchMatMul"}),
    ("aten::_softmax_backward_data", "1,4,8,8;1,4,8,8", "1,4,8,8", {}),
    ("aten::div", "1,4,8,8", "1,4,8,8", {}),
    ("aten::bmm", "4,8,8;4,8,2", "4,8,2", {"task_type": "AI_CORE", "op_type": "BatchMatMul"}),
]


@pytest.mark.parametrize(("kernel_us", "before_us"), [(3, 94), (30, 261)])
def test_fusion_attention_replays_forward_and_backward_as_one_kernel_each(
    kernel_us: int, before_us: int
) -> None:
    """Eight kernels (the last arrives at 86, ends 89, sync 94; or ends at 256, sync 261).
    Fused: FlashAttentionScore (F us) at 16; FlashAttentionScoreGrad (G us) launched second
    (host 6-12, arrival 26), from the later of 26 and 16 + F; the sync 5 us after it."""
    from msprof_py.analyzers import recost

    d = data(conv_pipeline(kernel_us, ops=ATTENTION + ATTENTION_BACKWARD,
                           sequences=[10, 11, 12, 13, 12, 11, 10, 9]))  # fmt: skip
    found = engine.run_rule("fusion_attention", RuleContext(d, {0: d}, None))
    assert found.status == "fired", found.message
    assert found.evidence["backward_found"] is True
    costs = recost.attention(d)
    (fwd,) = set(costs["fused_forward_ns"] / US)
    (bwd,) = set(costs["fused_backward_ns"] / US)
    assert fwd > 0 and bwd > 0
    after = max(26, 16 + fwd) + bwd + 5
    assert found.estimated_gain_us == pytest.approx(before_us - after, abs=1e-3)
    saved = found.evidence["device_saved_us_per_step"]
    assert saved == pytest.approx(8 * kernel_us - fwd - bwd, abs=1e-3)


def per_kernel(d: context.RankData, kernels: dict[int, int]) -> pd.Series:
    """New durations (ns, by task id) for the kernels at positions ``kernels`` (position in
    the step -> us) of every step of :func:`pipeline`'s three-kernel steps."""
    ids = d.all_tasks["task_id"]
    picked = ids[(ids % 3).isin(list(kernels))]
    return pd.Series([kernels[int(i) % 3] * US for i in picked], index=picked.to_numpy())


def test_two_changes_that_overlap_gain_less_together_than_apart() -> None:
    """12 us kernels arriving 16/26/36 us into the step: 16-28, 28-40, 40-52, sync 57.
    The middle kernel at 2 us: 28-30, the last starts on arrival 36, ends 48, sync 53 (4 us);
    the first at 2 us: 16-18, 26-38, 38-50, sync 55 (2 us); both: 16-18, 26-28, 36-48, sync
    53: the launches bind the step once either runs shorter, so 4 us, not 6."""
    d = data(pipeline(12))
    middle, first = per_kernel(d, {1: 2}), per_kernel(d, {0: 2})
    assert replay.gain_ns(d, (), middle) == pytest.approx(4 * US)
    assert replay.gain_ns(d, (), first) == pytest.approx(2 * US)
    replay.record(d, "a", (), middle)
    replay.record(d, "b", (), first)
    assert replay.joint_gain_ns(d, ["a", "b"]) == pytest.approx(4 * US)
    assert replay.joint_gain_ns(d, ["a"]) == pytest.approx(4 * US)
    assert replay.joint_gain_ns(d, []) == 0.0


def test_combining_keeps_every_removal_and_the_shortest_duration() -> None:
    a = replay.change([1, 2], pd.Series({3: 50.0, 4: 10.0}))
    b = replay.change([5], pd.Series({3: 20.0, 2: 5.0}))
    both = replay.combine([a, b])
    assert both.drop == {1, 2, 5}
    assert both.durations.to_dict() == {3: 20.0, 4: 10.0}  # task 2 is removed


def test_the_joint_estimate_replays_the_fired_findings_changes_together() -> None:
    """TransData (the middle 12 us kernel) removed: the first 16-28, the last arrives at 26
    (the removed launch costs no host or pipeline time) and runs 28-40, sync 45: 12 us. A
    second change runs the first and middle kernels in 2 us (alone: 16-18, 26-28, 36-48,
    sync 53: 4 us). Together: 16-18, the last 26-38, sync 43: 14 us, less than 12 + 4."""
    d = data(pipeline(12, middle="TransData"))
    td = engine.run_rule("transdata_heavy", RuleContext(d, {0: d}, None))
    assert td.status == "fired" and td.estimated_gain_us == pytest.approx(12.0)
    second = replay.record(d, "aicpu_fallback", (), per_kernel(d, {0: 2, 1: 2}))
    assert second == pytest.approx(4 * US)
    other = dataclasses.replace(td, rule="aicpu_fallback", estimated_gain_us=second / US)
    unreplayable = dataclasses.replace(td, rule="sync_in_loop", estimated_gain_us=7.0)
    joint = gains.joint(d, [td, other, unreplayable])
    assert joint["gain_us"] == pytest.approx(14.0)
    assert joint["rules"] == ["transdata_heavy", "aicpu_fallback"]
    assert joint["sum_us"] == pytest.approx(16.0)
    assert joint["not_included"] == ["sync_in_loop"]
    assert gains.joint(d, [unreplayable])["gain_us"] is None
    # by recipe: two findings naming one change are re-costed together, a third apart
    same = {"apply": {"compile": "npu"}}
    shared = [dataclasses.replace(f, evidence=f.evidence | same) for f in (td, other)]
    alone = dataclasses.replace(td, rule="aicpu_fallback", evidence={"apply": {"x": 1}})
    assert gains.joint(d, shared)["by_recipe"] == [
        {"apply": {"compile": "npu"}, "rules": ["transdata_heavy", "aicpu_fallback"],
         "gain_us": pytest.approx(14.0)}
    ]  # fmt: skip
    assert [g["gain_us"] for g in gains.joint(d, [shared[0], alone])["by_recipe"]] == [
        pytest.approx(12.0),
        pytest.approx(4.0),
    ]


def test_the_joint_gain_is_shown_beside_the_bound_with_what_it_includes() -> None:
    head = {
        "joint_gain_us": 14.0,
        "joint_gain_rules": ["transdata_heavy", "aicpu_fallback"],
        "joint_gain_sum_us": 16.0,
        "joint_gain_not_included": ["sync_in_loop"],
    }
    assert render.joint_text(head) == (
        "; re-costed together 14.0 us/step for transdata_heavy, aicpu_fallback (replayed at "
        "once; their single gains add up to 16.0; sync_in_loop only in the bound)"
    )
    assert build.joint_figure(head) == (
        "14.0 us/step for transdata_heavy, aicpu_fallback applied together (replayed); "
        "sync_in_loop only in the bound"
    )
    assert render.joint_text({"joint_gain_us": None}) == build.joint_figure({}) == ""


def test_tasks_sunk_in_a_graph_keep_their_device_time_and_cost_the_host_nothing() -> None:
    """The first two kernels of each step launched by a compiled graph: they reach the device
    as the host passes them (0 us), run 0-3 and 3-6 us; the third launch (stage 1 at 0-6 us,
    stage 2 to 16 us) runs 16-19 us and the sync returns at 24 us instead of 44 us."""
    d = data(pipeline(3))
    graph = d.all_tasks.loc[d.all_tasks["task_id"] % 3 != 2, "task_id"]
    assert replay.gain_ns(d, sunk=graph) == pytest.approx(20 * US)
    # kept for the joint estimate like any change, and combined with a removal
    both = replay.combine([replay.change(sunk=graph), replay.change(drop=[2])])
    assert both.sunk == frozenset(int(x) for x in graph) and both.drop == {2}


def test_side_tasks_of_a_graph_run_beside_its_chain() -> None:
    """Steps of three 30 us kernels (launched at 16, 26, 36 us: the step ends with the sync
    at 106 + 5 = 111 us). Sunk in a graph, they run 0-30, 30-60, 60-90 (sync back at 95 us:
    16 us gained); with the middle one on a stream of its own (a BatchNorm counter's
    update) it runs 0-30 beside the first, the third follows the first at 30-60 and the
    sync is back at 65 us: 46 us gained."""
    d = data(pipeline(30))
    ids = d.all_tasks["task_id"]
    assert replay.gain_ns(d, sunk=ids) == pytest.approx(16 * US)
    middle = ids[ids % 3 == 1]
    assert replay.gain_ns(d, sunk=ids, side=middle) == pytest.approx(46 * US)
    # side work only counts where it is sunk; a removal wins over it
    assert replay.change(sunk=[1, 2], side=[1, 5]).side == {1}
    both = replay.combine([replay.change(sunk=ids, side=middle), replay.change(drop=[1])])
    assert both.side == frozenset(int(x) for x in middle) - {1} and 1 not in both.sunk
    assert replay.record(d, "rule", sunk=ids, side=middle) == pytest.approx(46 * US)
    assert replay.joint_gain_ns(d, ["rule"]) == pytest.approx(46 * US)


def test_the_batch_norm_counter_updates_are_side_work_when_the_model_is_compiled() -> None:
    """host_bound_dispatch's replay puts the AI CPU updates of a BatchNorm's counter (an
    int64 add in a BatchNorm2d) beside the graph's chain; other AI CPU tasks stay on it."""
    from msprof_py.analyzers import aicpu

    b = Builder()
    aicpu_task = dict(start=10 * US, end=40 * US, task_type="AI_CPU", input_dtypes="int64")
    bn = b.op("aten::add_", 0, 2 * US, [aicpu_task], module="Net/BatchNorm2d", step=0)
    other = b.op("aten::add_", 2 * US, 4 * US, [aicpu_task], module="Net/Linear", step=0)
    b.step(0, 0, 200 * US)
    d = context.prepare(b.build(), 0, warmup=0)
    by_op = d.tasks.set_index("host_op_id")["task_id"]
    assert aicpu.module_counter_tasks(d).tolist() == [int(by_op[bn])]
    assert int(by_op[other]) not in aicpu.module_counter_tasks(d)


def test_compiling_the_model_sinks_its_forward_and_backward_not_the_optimizer() -> None:
    """Forward ops run in a module on the loop's thread, backward ops on autograd's thread:
    compiled; the loss (no module), the input copy and the optimizer step stay eager."""
    from msprof_py.analyzers.rules_schedule import compiled_model_tasks

    b = Builder()
    kernel = [dict(start=100 * US, end=101 * US)]
    ids = {
        "copy": b.op("aten::copy_", 0, 2 * US, [dict(start=90 * US, end=91 * US)], step=0),
        "forward": b.op("aten::mm", 2 * US, 4 * US, kernel, module="net.fc", step=0),
        "loss": b.op("aten::mse_loss", 4 * US, 6 * US, kernel, step=0),
        "backward": b.op("aten::mm", 6 * US, 8 * US, kernel, thread=2, step=0),
        "optimizer": b.op("aten::add_", 9 * US, 10 * US, kernel, step=0),
    }
    b.event("annotation", "Optimizer.step#SGD.step", 8 * US, 11 * US, step=0)
    b.step(0, 0, 200 * US)
    d = context.prepare(b.build(), 0, warmup=0)
    chosen = set(compiled_model_tasks(d).tolist())
    by_op = d.tasks.set_index("host_op_id")["task_id"]
    assert chosen == {int(by_op[ids["forward"]]), int(by_op[ids["backward"]])}
