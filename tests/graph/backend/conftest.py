"""Graph-mode backend tests: the npu device installed once per process, Dynamo reset per test."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
import torch

from msprof_py.device import SimulatedNpu
from msprof_py.graph import backend


@pytest.fixture(autouse=True)
def fresh_dynamo(npu: SimulatedNpu) -> Iterator[None]:
    """Each test compiles from scratch and counts its own recompiles."""
    backend.reset()
    gc.collect()  # graphs of earlier tests leave compiled_graphs()
    yield
    torch._dynamo.reset()
