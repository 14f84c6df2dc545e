"""Real Ascend profiles: torch_npu ``*_ascend_pt`` folders (``ascend_pt``) and msprof's own
``PROF_*`` folders (``msprof_prof``).

A path is an ``ascend_pt`` profile when it is one rank's folder (it holds
``ASCEND_PROFILER_OUTPUT/``) or a run folder whose subfolders are (one per rank; the rank comes
from ``profiler_info_<rank>.json`` or ``rank_id``). It is an ``msprof_prof`` profile when it is
a ``PROF_*`` folder holding ``mindstudio_profiler_output/`` or a folder whose subfolders are
(one per device/rank); a torch_npu folder holding a ``PROF_*`` folder stays ``ascend_pt``. A
folder that also holds ``msprof_raw/`` (our own recordings) never gets here:
:func:`msprof_py.load` reads the raw profile first. What is read from each file:
:mod:`msprof_py.importers.ascend_pt`, :mod:`msprof_py.importers.prof_dir`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from msprof_py.importers import Importer, build_profile, register
from msprof_py.importers.ascend_pt import rank_folders, read_rank
from msprof_py.importers.prof_dir import prof_folders, read_prof
from msprof_py.profile import Profile, ProfileError
from msprof_py.profile.loading import ProfileWarning

NAME = "ascend_pt"
PROF_NAME = "msprof_prof"

Reader = Callable[[Path], tuple[int, dict[str, Any], dict[str, pd.DataFrame], list[str]]]


def detect(path: Path) -> bool:
    """Whether ``path`` is (or holds) torch_npu profiler output."""
    return bool(rank_folders(Path(path)))


def detect_prof(path: Path) -> bool:
    """Whether ``path`` is (or holds) msprof's ``PROF_*`` output (and no torch_npu output)."""
    return bool(prof_folders(Path(path)))


def _load(path: Path, folders: list[Path], read: Reader, none: str) -> Profile:
    ranks = {}
    notes: list[str] = []
    for folder in folders:
        rank, meta, tables, warned = read(folder)
        if rank in ranks:
            raise ProfileError(f"{path}: two profiles for rank {rank} (the second: {folder})")
        ranks[rank] = (meta, tables)
        notes += warned
    if not ranks:
        raise ProfileError(f"{path}: {none}")
    profile = build_profile(path, ranks, notes)
    if any(meta.get("status") == "partial" for meta, _ in ranks.values()):
        profile.partial = True
    for note in notes:
        warnings.warn(note, ProfileWarning, stacklevel=4)
    return profile


def load(path: Path) -> Profile:
    """Every rank folder at ``path`` as one :class:`Profile` (``meta["source_format"]`` is
    ``ascend_pt``); damaged files raise a one-line :class:`ProfileError`."""
    path = Path(path)
    none = "no ASCEND_PROFILER_OUTPUT/ here or in its subfolders"
    return _load(path, rank_folders(path), read_rank, none)


def load_prof(path: Path) -> Profile:
    """Every ``PROF_*`` folder at ``path`` as one :class:`Profile` (``meta["source_format"]``
    is ``msprof_prof``); damaged files raise a one-line :class:`ProfileError`."""
    path = Path(path)
    none = "no PROF_*/mindstudio_profiler_output/ here or in its subfolders"
    return _load(path, prof_folders(path), read_prof, none)


register(Importer(NAME, detect, load, "ASCEND_PROFILER_OUTPUT/ and */ASCEND_PROFILER_OUTPUT/"))
register(
    Importer(
        PROF_NAME,
        detect_prof,
        load_prof,
        "PROF_*/mindstudio_profiler_output/ and */PROF_*/mindstudio_profiler_output/",
    )
)
