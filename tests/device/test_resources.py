"""ResourcePool: earliest-fit over a step function of busy units."""

from __future__ import annotations

import pytest

from msprof_py.device.resources import ResourcePool


def test_fits_immediately_when_free() -> None:
    pool = ResourcePool("aic", 4)
    assert pool.earliest(10, 4, 100) == 10


def test_waits_until_enough_units_are_free() -> None:
    pool = ResourcePool("aic", 4)
    pool.reserve(0, 100, 3)
    assert pool.earliest(0, 1, 50) == 0
    assert pool.earliest(0, 2, 50) == 100
    pool.reserve(0, 50, 1)
    assert pool.earliest(0, 1, 10) == 50


def test_uses_a_gap_only_if_the_task_fits_in_it() -> None:
    pool = ResourcePool("dma", 1)
    pool.reserve(0, 100, 1)
    pool.reserve(150, 300, 1)
    assert pool.earliest(0, 1, 50) == 100  # fits exactly in [100, 150)
    assert pool.earliest(0, 1, 51) == 300
    assert pool.earliest(120, 1, 30) == 120


def test_more_units_than_capacity_take_the_whole_pool() -> None:
    pool = ResourcePool("aiv", 2)
    pool.reserve(0, 10, 1)
    assert pool.earliest(0, 5, 10) == 10
    pool.reserve(10, 20, 5)
    assert pool.busy_units(15) == 2


def test_zero_duration_needs_free_units_at_that_instant() -> None:
    pool = ResourcePool("x", 1)
    pool.reserve(0, 100, 1)
    assert pool.earliest(50, 1, 0) == 100


def test_prune_forgets_the_past_without_changing_the_future() -> None:
    pool = ResourcePool("x", 2)
    for t in range(0, 1000, 100):
        pool.reserve(t, t + 50, 2)
    before = pool.earliest(520, 1, 40)
    pool.prune(500)
    assert len(pool) < 21
    assert pool.earliest(520, 1, 40) == before == 550
    assert pool.earliest(520, 1, 60) == 950  # every gap is 50 ns long


def test_needs_capacity() -> None:
    with pytest.raises(ValueError):
        ResourcePool("x", 0)
