"""The npu device is installed once per test process, with the default settings."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import msprof_py.adapter
from msprof_py.device import SimulatedNpu, TaskLog


@pytest.fixture(scope="session")
def npu() -> SimulatedNpu:
    return msprof_py.adapter.install()


@pytest.fixture
def log(npu: SimulatedNpu) -> Iterator[TaskLog]:
    """Records of everything the device does during one test."""
    records = TaskLog()
    npu.subscribe(records)
    yield records
    npu.unsubscribe(records)
