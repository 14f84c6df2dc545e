"""What a training script can call: ``msprof_py.step()`` and ``msprof_py.annotate(name)``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from msprof_py.adapter import runtime, steps
from msprof_py.collectors.session import range_begin, range_end


def step() -> None:
    """Mark the end of a training step (no effect when the npu device is not installed)."""
    if runtime.STATE is not None:
        steps.mark_step("msprof_py.step")


@contextmanager
def annotate(name: str) -> Iterator[None]:
    """Record the enclosed code as a named host range on the timeline. A data-loading range
    (``annotate("data loading")``) also has its real wall time measured, beside the timeline
    (the profile's ``measured_waits``), in both host-time modes."""
    opened = range_begin(name)
    try:
        yield
    finally:
        range_end(name, opened)
