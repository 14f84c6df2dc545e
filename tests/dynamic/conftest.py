"""Dynamic-shape tests: a clean compile cache per test (the npu fixtures are the suite's)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from msprof_py.adapter import runtime
from msprof_py.adapter.compile_cache import CompileCache
from msprof_py.device import SimulatedNpu


@pytest.fixture
def cache(npu: SimulatedNpu) -> Iterator[CompileCache]:
    """The adapter's compile cache, emptied; its mode is restored afterwards."""
    compiled = runtime.state().compiled
    jit = compiled.jit
    compiled.clear()
    yield compiled
    compiled.set_mode(jit)
