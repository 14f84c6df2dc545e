"""Conformance tests: code nobody here wrote, run on npu and compared with CPU."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import torchvision_guard

torchvision_guard.guard()

import msprof_py.adapter  # noqa: E402
from msprof_py.device import SimulatedNpu  # noqa: E402


@pytest.fixture(scope="session")
def npu() -> SimulatedNpu:
    return msprof_py.adapter.install()
