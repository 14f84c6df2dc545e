"""The analysis figures add up, on random timelines and on recorded ones.

For every analysed step: computing + communication (not overlapped) + free == step time;
the free time by cause (idle gaps by host cause, copies-only time) adds up to free time;
every share is in [0, 1]; no number in the JSON document is inf or NaN; the combined gain is
never larger than the step. Random timelines cover the host running ahead of the device
(tasks long after their step's host marks), streams overlapping, steps without work, outlier
steps and several optimizers per iteration.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Any

import numpy as np
from analyze_helpers import Builder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msprof_py.analyzers import analyze, context, timeline
from msprof_py.analyzers.schema import to_json

KINDS = [
    ("kernel", "AI_CORE", "MatMul"),
    ("kernel", "AI_VECTOR_CORE", "Add"),
    ("kernel", "AI_CPU", "Add"),
    ("memcpy", "DMA", "MEMCPY_H2D"),
    ("memset", "DMA", "MEMSET"),
    ("collective", "HCCL", "allreduce"),
]

task = st.tuples(
    st.integers(0, len(KINDS) - 1),  # what it is
    st.integers(0, 2),  # stream
    st.integers(0, 40_000),  # host gap before its launch
    st.integers(0, 30_000),  # device duration
    st.integers(0, 50_000),  # extra device delay (the device lagging behind the host)
)
step_work = st.lists(task, min_size=0, max_size=6)
timeline_strategy = st.tuples(
    st.lists(step_work, min_size=1, max_size=6),
    st.booleans(),  # a blocking sync at the end of each step (else the host runs ahead)
    st.integers(0, 2),  # optimizers per iteration
    st.booleans(),  # data-loading annotations
)


def build(spec: tuple) -> Builder:
    """A one-rank profile from the drawn steps: each step's host ops launch its tasks; the
    device runs them in order per stream, possibly much later than the host."""
    steps, synced, optimizers, loading = spec
    b = Builder()
    host = 0
    stream_free = [0, 0, 0]
    for i, work in enumerate(steps):
        start = host
        if loading:
            b.event("annotation", "DataLoader.__next__", host, host + 5_000, step=i)
            host += 5_000
        for kind_i, stream, gap, dur, delay in work:
            kind, task_type, op_type = KINDS[kind_i]
            host += gap
            t0 = max(host + 2_000 + delay, stream_free[stream])
            stream_free[stream] = t0 + dur
            extra: dict[str, Any] = {"stream_id": stream}
            if kind == "memcpy":
                extra |= {"copy_kind": "HOST_TO_DEVICE", "bytes": 1 << 20}
            if kind == "collective":
                extra |= {"collective": "allreduce", "world_size": 2, "bytes": 1 << 20}
            b.op(
                "aten::x",
                host,
                host + 2_000,
                [dict(start=t0, end=t0 + dur, kind=kind, task_type=task_type, op_type=op_type)],
                step=i,
                **extra,
            )
            host += 2_000
        if synced:
            done = max(stream_free)
            b.event("sync", "aclrtSynchronizeDevice", host, max(host, done) + 1_000, step=i)
            host = max(host, done) + 1_000
        host += 1_000
        b.step(i, start, host, optimizer_id=i % optimizers if optimizers else -1)
    b.step(len(steps), host, host + 1_000, source="end of run")
    return b


def _numbers(value: Any, path: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [x for k, v in value.items() for x in _numbers(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [x for v in value for x in _numbers(v, path)]
    return [(path, value)]


SHARE_KEY = re.compile(r"(^|_)(share|utilisation|occupancy|ratio)(_|$)")


def check_document(doc: dict[str, Any]) -> None:
    """No inf or NaN anywhere (JSON null stands for undefined); shares in [0, 1]; the
    combined gain no larger than the step."""
    text = json.dumps(doc, allow_nan=False)  # raises on inf / NaN
    assert not re.search(r"\b(nan|inf)x?\b", text, re.IGNORECASE), "inf/nan in a message"
    for path, value in _numbers(doc):
        if isinstance(value, float):
            assert math.isfinite(value), path
        last = path.rsplit(".", 1)[-1]
        if (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and SHARE_KEY.search(last)
            and last not in ("ratio_to_median", "rate_ratio")
        ):
            assert 0.0 <= value <= 1.0 + 1e-9, (path, value)
    h = doc["headline"]
    assert 0.0 <= h["estimated_gain_us"] <= h["mean_step_us"] + 1e-6


def check_steps(data: context.RankData) -> None:
    """The partition of every analysed step."""
    bd = timeline.step_breakdown(data)
    assert len(bd) == len(data.steps)
    parts = bd["computing_ns"] + bd["comm_not_overlapped_ns"] + bd["free_ns"]
    assert (parts == bd["step_ns"]).all()
    assert (bd["free_ns"] >= 0).all() and (bd["comm_not_overlapped_ns"] >= 0).all()
    causes = [timeline.IDLE_COLUMNS[c] for c in (*timeline.CAUSES, timeline.COPIES)]
    assert (bd[causes].sum(axis=1) == bd["free_ns"]).all()
    assert (bd["idle_ns"] <= bd["free_ns"]).all()
    assert ((bd["utilisation"] >= 0) & (bd["utilisation"] <= 1)).all()
    assert (bd["device_busy_ns"] <= bd["step_ns"]).all()
    assert (bd["stage_ns"] <= bd["step_ns"]).all() and (bd["preparing_ns"] >= 0).all()
    # the windows never overlap
    lo, hi, _ = timeline.windows(data)
    assert (hi[:-1] <= lo[1:]).all()
    by_cause = timeline.idle_by_cause(data)
    assert int(by_cause["total_ns"].sum()) == int(bd["free_ns"].sum())


FAST = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@FAST
@given(timeline_strategy, st.sampled_from([None, 0, 1]), st.booleans())
def test_random_timelines_add_up(spec: tuple, warmup: int | None, keep: bool) -> None:
    try:
        data = context.prepare(build(spec).build(), 0, warmup, keep)
    except context.WarmupError:  # a warm-up that leaves no step is a clean error (exit 2)
        return
    check_steps(data)


#: whole analyses per run of the document property (a second or more each): a few in the
#: default run, more with MSPROF_DOCUMENT_EXAMPLES=50
DOCUMENT_EXAMPLES = int(os.environ.get("MSPROF_DOCUMENT_EXAMPLES", "4"))


@settings(FAST, max_examples=DOCUMENT_EXAMPLES)
@given(timeline_strategy, st.sampled_from([None, 0]))
def test_random_timelines_make_a_clean_document(spec: tuple, warmup: int | None) -> None:
    try:
        document = to_json(analyze(build(spec).build(), warmup=warmup))
    except context.WarmupError:  # a warm-up that leaves no step is a clean error (exit 2)
        return
    check_document(document)


def test_the_host_running_ahead_keeps_each_steps_work_in_its_step() -> None:
    """No sync in the loop: the host marks all steps within 30 us while the device runs
    each step's 100 us kernel one after the other. Each step's device window holds its own
    kernel: 100 % busy, nothing free, no share above 1."""
    b = Builder()
    for i in range(4):
        b.op(
            "aten::mm",
            i * 10_000,
            i * 10_000 + 2_000,
            [dict(start=5_000 + i * 100_000, end=5_000 + (i + 1) * 100_000, task_type="AI_CORE")],
            step=i,
        )
        b.step(i, i * 10_000, (i + 1) * 10_000)
    data = context.prepare(b.build(), 0, warmup=1)
    bd = timeline.step_breakdown(data)
    assert bd["step_ns"].tolist() == [100_000] * 3
    assert bd["host_step_ns"].tolist() == [10_000] * 3
    assert bd["computing_ns"].tolist() == [100_000] * 3 and (bd["free_ns"] == 0).all()
    assert bd["utilisation"].tolist() == [1.0] * 3
    a = analyze(b.build(), warmup=1)
    doc = to_json(a)
    check_document(doc)
    assert doc["headline"]["utilisation"] == 1.0
    assert a.finding("low_utilisation").status == "ok"


def test_an_outlier_step_is_reported_and_left_out() -> None:
    """Eight 10 us steps and one of 1 ms (an evaluation pass in the loop)."""
    b = Builder()
    t = 0
    lengths = [10_000] * 4 + [1_000_000] + [10_000] * 4
    for i, n in enumerate(lengths):
        b.op("aten::add", t, t + 1_000, [dict(start=t + 1_000, end=t + n - 1_000)], step=i)
        b.step(i, t, t + n)
        t += n
    a = analyze(b.build())
    info = a.profile
    assert info["steps_analysed"] == [1, 2, 3, 5, 6, 7, 8]
    assert [o["step"] for o in info["outlier_steps"]] == [4]
    assert info["outlier_steps"][0]["ratio_to_median"] == 100.0
    assert info["mean_step_ns"] == info["median_step_ns"] == 10_000
    assert any("step 4 is an outlier" in n for n in info["notes"])
    kept = analyze(b.build(), keep_outliers=True).profile
    assert kept["steps_analysed"] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert kept["median_step_ns"] == 10_000
    assert kept["mean_step_ns"] == (7 * 10_000 + 1_000_000) / 8


def test_two_optimizers_per_iteration_are_said() -> None:
    b = Builder()
    for i in range(4):
        b.op(
            "aten::add",
            i * 10_000,
            i * 10_000 + 1_000,
            [dict(start=i * 10_000 + 1_000, end=i * 10_000 + 5_000)],
            step=i,
        )
        b.step(i, i * 10_000, (i + 1) * 10_000, optimizer_id=i % 2)
    info = analyze(b.build()).profile
    assert info["optimizers_per_step"] == 2
    assert any("2 optimizers" in n and "--steps-from" in n for n in info["notes"])


def test_a_recording_after_warmup_analyses_its_first_step() -> None:
    """``msprof --warmup 2 --iteration 2`` records steps 2 and 3: both are analysed."""
    b = Builder(warmup=2, iteration=2)
    for i in (2, 3):
        t = i * 10_000
        b.op("aten::add", t, t + 1_000, [dict(start=t + 3_000, end=t + 9_000)], step=i)
        b.step(i, t, t + 10_000)
    data = context.prepare(b.build(), 0)
    assert data.steps["step"].tolist() == [2, 3] and data.warmup_skipped == []
    # the first recorded window starts at its first task (the device may still be running
    # unrecorded warm-up work before it); the next one at the end of the previous step
    assert data.steps["dev_start_ns"].tolist() == [23_000, 30_000]


def test_combined_gain_is_bounded_not_summed() -> None:
    from msprof_py.analyzers.findings import rule_specs
    from msprof_py.analyzers.gains import combined

    specs = rule_specs()
    fired = [
        specs["host_bound_dispatch"].fire(
            {
                "share": 0.5,
                "time_us": 600.0,
                "median_kernel_us": 1,
                "host_per_op_us": 1,
                "limiter": "",
            },
            0.5,
            600.0,
            0,
        ),
        specs["low_utilisation"].fire(
            {
                "utilisation": 0.4,
                "batch": 32,
                "best": 64,
                "limit": 0.8,
                "capped": "",
                "step_us": 1000.0,
                "throughput": 64e3,
                "throughput_now": 32e3,
                "speedup": 2.0,
                "basis": "estimated from the recorded memory",
                "tune": "",
            },
            0.6,
            700.0,
            0,
        ),
        specs["sync_in_loop"].fire(
            {
                "count_per_step": 1,
                "kinds": "",
                "blocked_us": 1,
                "time_us": 100.0,
                "share": 0.1,
                "where": "",
                "copy_us": 0.0,
            },
            0.1,
            100.0,
            0,
        ),
    ]
    got = combined(fired, {"step": 1000.0, "computing": 400.0, "communication": 0.0, "free": 600.0})
    assert got["sum_us"] == 1400.0
    # dispatch + sync (disjoint causes: 700) vs the batch gain (700), capped by free (600)
    assert got["estimated_gain_us"] == 600.0
    assert np.isclose(sum(got["by_part"].values()), 600.0)
