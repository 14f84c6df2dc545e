"""Suite-wide set-up: the npu device is registered before any test runs.

PyTorch's autograd engine sizes its per-device ready queues at the process's first backward
pass; a device registered after that point fails its own backward passes with an internal
assert. Tests are spread over pytest-xdist workers file by file, so a CPU-only test that trains
(a torch.profiler trace, a traced graph) may run before an npu test in the same worker:
installing the npu here, with the default settings every in-process test uses, keeps the
order of files irrelevant. Tests that need other settings run in a fresh process.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import msprof_py.adapter
from msprof_py.device import SimulatedNpu, TaskLog

msprof_py.adapter.install()


@pytest.fixture(scope="session")
def npu() -> SimulatedNpu:
    """The simulated device behind the installed npu."""
    return msprof_py.adapter.install()


@pytest.fixture
def log(npu: SimulatedNpu) -> Iterator[TaskLog]:
    """Records of everything the device does during one test."""
    records = TaskLog()
    npu.subscribe(records)
    yield records
    npu.unsubscribe(records)
