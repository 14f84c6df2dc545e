"""Graph-mode conformance: third-party models compiled with backend="npu" against eager CPU."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

# transformers imports torchvision: the conformance suite's guard keeps its Python parts
# importable where the index's CUDA build cannot load its C++ ops
sys.path.insert(0, str(Path(__file__).parents[2] / "conformance"))

import torchvision_guard

torchvision_guard.guard()

from msprof_py.device import SimulatedNpu  # noqa: E402
from msprof_py.graph import backend  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_dynamo(npu: SimulatedNpu) -> Iterator[None]:
    """Each test compiles from scratch."""
    backend.reset()
    gc.collect()
    yield
    torch._dynamo.reset()
