"""Graph-mode samples: run in this process on the installed npu, or as scripts (slow)."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from msprof_py.device import SimulatedNpu
from msprof_py.graph import backend

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "sample_runs"))


@pytest.fixture(autouse=True)
def fresh_dynamo(npu: SimulatedNpu) -> Iterator[None]:
    backend.reset()
    gc.collect()
    yield
    torch._dynamo.reset()
