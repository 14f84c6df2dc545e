"""The npu device installed once per test process (ascend910b); a clean compile cache."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import msprof_py.adapter
from msprof_py.adapter import runtime
from msprof_py.adapter.compile_cache import CompileCache
from msprof_py.device import SimulatedNpu, TaskLog


@pytest.fixture(scope="session")
def npu() -> SimulatedNpu:
    return msprof_py.adapter.install()


@pytest.fixture
def cache(npu: SimulatedNpu) -> Iterator[CompileCache]:
    """The adapter's compile cache, emptied; its mode is restored afterwards."""
    compiled = runtime.state().compiled
    jit = compiled.jit
    compiled.clear()
    yield compiled
    compiled.set_mode(jit)


@pytest.fixture
def log(npu: SimulatedNpu) -> Iterator[TaskLog]:
    """Records of everything the device does during one test."""
    records = TaskLog()
    npu.subscribe(records)
    yield records
    npu.unsubscribe(records)
