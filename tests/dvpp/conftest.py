"""Fixtures of the DVPP tests: the torchvision_npu shim on the PIL backend, and a task log
that starts after the device has drained what earlier tests queued."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest
import torch

import msprof_py.adapter
from msprof_py.device import SimulatedNpu, TaskLog


@pytest.fixture(scope="module")
def tvn() -> ModuleType:
    """The torchvision_npu shim, image backend reset to PIL."""
    msprof_py.adapter.install()
    import torchvision_npu

    torchvision_npu.set_image_backend("PIL")
    return torchvision_npu


@pytest.fixture
def log(npu: SimulatedNpu) -> Iterator[TaskLog]:
    """Records of everything the device does during one test, after a synchronize."""
    torch.npu.synchronize()
    records = TaskLog()
    npu.subscribe(records)
    yield records
    npu.unsubscribe(records)
