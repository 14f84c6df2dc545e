"""Real Ascend profiles: torch_npu ``*_ascend_pt`` folders, registered as ``ascend_pt``.

A path is an ``ascend_pt`` profile when it is one rank's folder (it holds
``ASCEND_PROFILER_OUTPUT/``) or a run folder whose subfolders are (one per rank; the rank comes
from ``profiler_info_<rank>.json`` or ``rank_id``). A folder that also holds ``msprof_raw/`` (our
own recordings) never gets here: :func:`msprof_py.load` reads the raw profile first. What is
read from each file: :mod:`msprof_py.importers.ascend_pt`.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from msprof_py.importers import Importer, build_profile, register
from msprof_py.importers.ascend_pt import rank_folders, read_rank
from msprof_py.profile import Profile, ProfileError
from msprof_py.profile.load import ProfileWarning

NAME = "ascend_pt"


def detect(path: Path) -> bool:
    """Whether ``path`` is (or holds) torch_npu profiler output."""
    return bool(rank_folders(Path(path)))


def load(path: Path) -> Profile:
    """Every rank folder at ``path`` as one :class:`Profile` (``meta["source_format"]`` is
    ``ascend_pt``); damaged files raise a one-line :class:`ProfileError`."""
    path = Path(path)
    ranks = {}
    notes: list[str] = []
    for folder in rank_folders(path):
        rank, meta, tables, warned = read_rank(folder)
        if rank in ranks:
            raise ProfileError(f"{path}: two profiles for rank {rank} (the second: {folder})")
        ranks[rank] = (meta, tables)
        notes += warned
    if not ranks:
        raise ProfileError(f"{path}: no ASCEND_PROFILER_OUTPUT/ here or in its subfolders")
    profile = build_profile(path, ranks, notes)
    if any(meta.get("status") == "partial" for meta, _ in ranks.values()):
        profile.partial = True
    for note in notes:
        warnings.warn(note, ProfileWarning, stacklevel=3)
    return profile


register(Importer(NAME, detect, load, "ASCEND_PROFILER_OUTPUT/ and */ASCEND_PROFILER_OUTPUT/"))
