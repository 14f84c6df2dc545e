"""msprof-py: an msprof-like profiling toolkit for PyTorch on a simulated Ascend-style NPU.

import msprof_py
profile = msprof_py.load("profile_data")    # a run's output folder, a rank, or a raw profile
msprof_py.step()                            # in a training script: end of a step
with msprof_py.annotate("data loading"):    # a named range on the timeline
    ...
with msprof_py.record() as rec:             # record a block in this process
    ...
analysis = rec.analyze()
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

from msprof_py.analyzers import Analysis, analyze
from msprof_py.profile import Profile, ProfileError, load

if TYPE_CHECKING:
    from msprof_py.collectors.inprocess import Recording

__version__ = "0.1.0"
__all__ = [
    "Analysis",
    "Profile",
    "ProfileError",
    "analyze",
    "annotate",
    "load",
    "record",
    "step",
]


def step() -> None:
    """Mark the end of a training step (recorded when running under msprof)."""
    from msprof_py.collectors.api import step as _step

    _step()


def annotate(name: str) -> AbstractContextManager[None]:
    """A context manager recording the enclosed code as a named range on the timeline."""
    from msprof_py.collectors.api import annotate as _annotate

    return _annotate(name)


def record(
    output: str | Path | None = None,
    *,
    device: str | Path | None = None,
    numerics: str | None = None,
    host_time: str | None = None,
    warmup: int = 0,
    iteration: int | None = None,
    export: bool = False,
    settle: bool = True,
) -> Recording:
    """Record the code inside ``with msprof_py.record() as rec:`` on the simulated npu device
    (in this process, as often as needed); then ``rec.load()`` / ``rec.analyze()``.
    See :func:`msprof_py.collectors.inprocess.record`."""
    from msprof_py.collectors.inprocess import record as _record

    return _record(
        output,
        device=device,
        numerics=numerics,
        host_time=host_time,
        warmup=warmup,
        iteration=iteration,
        export=export,
        settle=settle,
    )
