"""The npu device is installed once per test process, with the default settings."""

from __future__ import annotations

import subprocess
import sys
import textwrap
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


def run_script(code: str, timeout: int = 120) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (for settings a process can only install once)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
