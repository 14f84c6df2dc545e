"""One side of a comparison: a profile's rank, narrowed to the steps compared.

The steps are the analysed steps of :func:`msprof_py.analyzers.context.prepare` (warm-up and
outlier steps left out, as ``msprof analyze`` does), or the one step ``--base-step`` /
``--new-step`` names. A side **on device** has device work (kernels, copies, collectives);
one without (a CPU-only PyTorch profiler trace: host ops only) is compared by its host op
time: a *projection*.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from msprof_py.analyzers.context import RankData, prepare
from msprof_py.analyzers.ops import WORK_KINDS
from msprof_py.profile import Profile, ProfileError


class CompareError(ProfileError):
    """Two profiles that cannot be compared as asked (a missing step, rank ...): one line."""


@dataclass
class Side:
    """``label`` (BASE or NEW), the profile's ``path``, the rank's :class:`RankData` narrowed
    to the compared steps, and whether it has device work (``on_device``)."""

    label: str
    path: str
    data: RankData
    on_device: bool
    #: a host-only side (a projection): the op names the other side launched device work
    #: from, so that its ops are taken at the level the device run records them
    peer_names: frozenset[str] = frozenset()

    @property
    def steps(self) -> list[int]:
        """The compared step numbers."""
        return [int(s) for s in self.data.steps["step"]]

    @property
    def n_steps(self) -> int:
        """Compared steps (at least 1: per-step means stay finite)."""
        return self.data.n_steps

    @property
    def meta(self) -> dict[str, Any]:
        """The rank's meta.json."""
        return self.data.meta

    @property
    def source(self) -> str:
        """``device`` (device tasks) or ``host`` (host op time: a projection)."""
        return "device" if self.on_device else "host"


def load_profile(item: Profile | str | Path) -> Profile:
    """``item`` as a Profile (a path is loaded with every column, strings categorical)."""
    if isinstance(item, Profile):
        return item
    from msprof_py.analyzers.api import resolve

    path = Path(item)
    if not path.exists():
        raise CompareError(f"{path}: no such file or directory")
    return resolve(path, categorical=True)


def _narrow(data: RankData, step: int, label: str) -> RankData:
    """``data`` with only ``step`` as the analysed step."""
    every = data.choice.all_steps
    if step not in set(int(s) for s in every["step"]):
        numbers = [int(s) for s in every["step"]]
        shown = f"{numbers[0]}-{numbers[-1]}" if numbers else "none"
        raise CompareError(f"{label} has no step {step} (steps: {shown})")
    steps = data.steps[data.steps["step"] == step].reset_index(drop=True)

    def of(frame: pd.DataFrame) -> pd.DataFrame:
        return frame[frame["step"] == step].reset_index(drop=True)

    return dataclasses.replace(
        data,
        steps=steps,
        tasks=of(data.all_tasks),
        host=of(data.all_host),
        memory=of(data.all_memory),
        cache={},
        offsets={},
    )


def make_side(
    label: str,
    profile: Profile,
    rank: int,
    step: int | None = None,
    warmup: int | None = None,
) -> Side:
    """The side ``label`` of a comparison: ``rank`` of ``profile``, its analysed steps or only
    ``step``."""
    if rank not in profile.ranks:
        raise CompareError(f"{label} ({profile.path}) has no rank {rank} (ranks: {profile.ranks})")
    if step is None:
        data = prepare(profile, rank, warmup)
    else:
        data = _narrow(prepare(profile, rank, 0, keep_outliers=True), step, label)
    work = data.all_tasks["kind"].isin(WORK_KINDS).to_numpy()
    return Side(label, str(profile.path), data, bool(np.any(work)))
