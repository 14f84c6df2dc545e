"""Finding messages print per-step counts so that a count that is not zero never reads 0."""

from __future__ import annotations

from msprof_py.analyzers.findings import _Count, _counts


def test_a_fractional_count_per_step_is_not_printed_as_zero() -> None:
    values = _counts({"count_per_step": 0.4, "time_us": 0.4, "kernels_per_step": 12.0})
    text = "{count_per_step:.0f} task(s), {kernels_per_step:.0f} kernels, {time_us:.0f} us"
    assert text.format(**values) == "0.4 task(s), 12 kernels, 0 us"
    assert f"{_Count(0.0):.0f}" == "0" and f"{_Count(2.6):.0f}" == "3"
