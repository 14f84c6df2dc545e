"""What a training script can call: ``msprof_py.step()`` and ``msprof_py.annotate(name)``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from msprof_py.adapter import runtime, steps
from msprof_py.collectors.session import active_session


def step() -> None:
    """Mark the end of a training step (no effect when the npu device is not installed)."""
    if runtime.STATE is not None:
        steps.mark_step("msprof_py.step")


@contextmanager
def annotate(name: str) -> Iterator[None]:
    """Record the enclosed code as a named host range on the timeline."""
    state = runtime.STATE
    start = state.npu.engine.host_ns if state is not None else 0
    session = active_session()
    step = session.recorder.step if session is not None and session.recorder else None
    try:
        yield
    finally:
        if state is not None and session is not None and session.recorder is not None:
            session.recorder.annotation(name, start, state.npu.engine.host_ns, step)
