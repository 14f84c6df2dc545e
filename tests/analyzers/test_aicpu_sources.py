"""AI CPU tasks are attributed to their source: the user's code gets a dtype change,
framework internals (BatchNorm's counter, the GradScaler's float64 inverse scale) get advice
for that source and count no gain."""

from __future__ import annotations

from analyze_helpers import Builder

from msprof_py.analyzers import aicpu, context, engine
from msprof_py.analyzers.findings import FIRED
from msprof_py.analyzers.rules_compute import RuleContext

TASK_NS = 30_000


def profile(user: bool = True, bn: bool = True, scaler: bool = True) -> context.RankData:
    """The AI CPU tasks back to back on the device, launched early (2 us apart on the host,
    each arrived before the stream is free): the step is bound by the device."""
    b = Builder().step(0, 0, 200_000)
    t = h = 0

    def aicpu_op(name: str, dtype: str, **cols) -> None:
        nonlocal t, h
        kernel = dict(
            start=t, end=t + TASK_NS, op_type="Add", task_type="AI_CPU", input_dtypes=dtype,
            output_dtypes=dtype, bytes=16, launch_ns=h + 100,
        )  # fmt: skip
        b.op(name, h, h + 100, [kernel], input_dtypes=dtype, **cols)
        t += TASK_NS
        h += 2_000

    if bn:
        aicpu_op("aten::add_", "int64", module="Net/BatchNorm2d")
    if user:
        aicpu_op("aten::add", "int64", module="Net/Linear")
    if scaler:
        b.event("annotation", "GradScaler.unscale_", h, h + 1_000)
        aicpu_op("aten::reciprocal", "float64")
    return context.prepare(b.build(), 0, warmup=0)


def finding(data: context.RankData):
    return engine.run_rule("aicpu_fallback", RuleContext(data, {0: data}))


def test_each_task_gets_its_source() -> None:
    t = aicpu.tasks(profile())
    assert t["source"].tolist() == ["BatchNorm2d", "user", "GradScaler"]
    assert t["to_dtype"].tolist() == ["", "int32", ""]
    assert "num_batches_tracked" in t["suggestion"].iloc[0]
    assert "drop the GradScaler" in t["suggestion"].iloc[2]
    table = aicpu.table(profile())
    assert set(table["change"]) == {
        "framework internal (BatchNorm2d)",
        "run in int32",
        "framework internal (GradScaler)",
    }


def test_only_the_users_task_counts_toward_the_gain() -> None:
    both = finding(profile())
    alone = finding(profile(bn=False, scaler=False))
    assert both.status == alone.status == FIRED
    assert both.estimated_gain_us == alone.estimated_gain_us > 0
    assert "Change: run in int32" in both.message
    assert "60.0 us per step come from framework internals (BatchNorm2d, GradScaler)" in (
        both.message
    )


def test_framework_only_tasks_say_there_is_nothing_to_change() -> None:
    f = finding(profile(user=False))
    assert f.status == FIRED and f.estimated_gain_us == 0
    assert "Nothing to change in the script" in f.advice
    assert "int32" not in f.message.split("Source:")[1].split("-")[0]
