"""The tuner's search: doubling then bisection, the cap, failures (hand-made trials)."""

from __future__ import annotations

import pytest

from msprof_py.tune import Trial, search

GIB = 2**30


def fake(per_sample: int, floor: int = GIB, capacity: int = 10 * GIB):
    tried: list[int] = []

    def measure(batch: int) -> Trial:
        tried.append(batch)
        peak = floor + batch * per_sample
        if peak > capacity:
            return Trial(batch, error="out of memory")
        return Trial(batch, peak, capacity, step_ns=1_000 * batch)

    return measure, tried


def test_doubles_then_bisects_to_the_largest_batch_within_the_limit() -> None:
    # 80% of 10 GiB = 8 GiB: floor 1 GiB + b x 0.1 GiB <= 8 GiB -> b <= 70
    measure, tried = fake(GIB // 10)
    result = search(measure, min_batch=1, max_batch=256, limit=0.8)
    assert result.best == 70
    assert tried[:8] == [1, 2, 4, 8, 16, 32, 64, 128]
    assert tried[8:] == [96, 80, 72, 68, 70, 71]  # bisection between 64 and 128
    assert not result.capped


def test_granularity_stops_the_bisection_early() -> None:
    measure, tried = fake(GIB // 10)
    result = search(measure, min_batch=8, max_batch=256, limit=0.8, granularity=8)
    assert result.best == 64 and tried == [8, 16, 32, 64, 128, 96, 80, 72]


def test_the_cap_is_the_answer_when_memory_allows_more() -> None:
    measure, tried = fake(GIB // 1000)
    result = search(measure, min_batch=32, max_batch=256)
    assert (result.best, result.capped, tried) == (256, True, [32, 64, 128, 256])


def test_out_of_memory_counts_as_not_fitting_and_rows_are_sorted() -> None:
    measure, _ = fake(GIB, capacity=4 * GIB)  # 1 + b GiB: b=2 is 75%, b=4 runs out
    result = search(measure, min_batch=1, max_batch=16, limit=0.8)
    assert result.best == 2
    rows = result.table()
    assert [r["batch"] for r in rows] == sorted(r["batch"] for r in rows)
    assert next(r for r in rows if r["batch"] == 4)["error"] == "out of memory"
    assert next(r for r in rows if r["batch"] == 2)["share"] == pytest.approx(0.75)


def test_nothing_fits() -> None:
    measure, _ = fake(GIB, floor=9 * GIB)
    assert search(measure, min_batch=1).best == 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"limit": 0}, "memory limit"), ({"min_batch": 0}, "min_batch"),
     ({"min_batch": 8, "max_batch": 4}, "max_batch")],
)  # fmt: skip
def test_bad_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        search(fake(1)[0], **kwargs)
