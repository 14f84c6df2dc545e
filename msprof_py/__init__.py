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

import typing as _typing

from msprof_py.lazy import lazy_getattr as _lazy_getattr

if _typing.TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from msprof_py.analyzers import Analysis, analyze
    from msprof_py.collectors.inprocess import record
    from msprof_py.profile import Profile, ProfileError, load

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


#: the public names and the module each comes from, imported on first use: ``record`` needs
#: torch, loading and analysing profiles need pandas, and the ``msprof`` launcher needs neither
_LAZY = {
    "Analysis": "msprof_py.analyzers",
    "analyze": "msprof_py.analyzers",
    "Profile": "msprof_py.profile",
    "ProfileError": "msprof_py.profile",
    "load": "msprof_py.profile",
    "record": "msprof_py.collectors.inprocess",
}


__getattr__ = _lazy_getattr(__name__, globals(), _LAZY)


def __dir__() -> list[str]:
    """The API only (``dir(msprof_py)``), not the imports and subpackages behind it."""
    return sorted([*__all__, "__version__"])
