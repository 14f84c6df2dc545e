"""The npu device is installed once per test process, with the default settings."""

from __future__ import annotations

import pytest

import msprof_py.adapter
from msprof_py.device import SimulatedNpu


@pytest.fixture(scope="session")
def npu() -> SimulatedNpu:
    return msprof_py.adapter.install()
