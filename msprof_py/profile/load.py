"""Loading stored profiles: ``msprof_py.load(path)``.

A path may be a run's output folder (one ``*_ascend_pt`` folder per rank), one rank's
``*_ascend_pt`` folder, or a raw profile folder itself. Tables of all ranks are concatenated
with a ``rank`` column; ``Profile.for_rank(r)`` narrows to one rank.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from msprof_py.profile.schema import META_FILE, RAW_DIR, TABLES


class ProfileError(ValueError):
    """A path holds no loadable profile (the message says what was looked for)."""


@dataclass
class Profile:
    """A loaded profile: per-table DataFrames (with ``rank``) and per-rank metadata."""

    path: Path
    meta: dict[int, dict[str, Any]]
    tables: dict[str, pd.DataFrame] = field(repr=False)

    @property
    def ranks(self) -> list[int]:
        """Ranks present, ascending."""
        return sorted(self.meta)

    @property
    def tasks(self) -> pd.DataFrame:
        return self.tables["tasks"]

    @property
    def host_events(self) -> pd.DataFrame:
        return self.tables["host_events"]

    @property
    def memory(self) -> pd.DataFrame:
        return self.tables["memory"]

    @property
    def steps(self) -> pd.DataFrame:
        return self.tables["steps"]

    def for_rank(self, rank: int) -> Profile:
        """The same profile narrowed to ``rank``."""
        if rank not in self.meta:
            raise ProfileError(f"{self.path}: no rank {rank} (ranks: {self.ranks})")
        tables = {
            name: df[df["rank"] == rank].reset_index(drop=True) for name, df in self.tables.items()
        }
        return Profile(self.path, {rank: self.meta[rank]}, tables)


def raw_folders(path: Path) -> list[Path]:
    """Raw profile folders at or below ``path`` (at most two levels down)."""
    if (path / META_FILE).is_file():
        return [path]
    if (path / RAW_DIR / META_FILE).is_file():
        return [path / RAW_DIR]
    found = sorted(p.parent for p in path.glob(f"*/{RAW_DIR}/{META_FILE}"))
    return found


def _read_table(folder: Path, name: str) -> pa.Table:
    parts = sorted(folder.glob(f"{name}-*.parquet"))
    schema = TABLES[name].schema
    if not parts:
        return schema.empty_table()
    return pa.concat_tables([pq.read_table(p, schema=schema) for p in parts])


def load(path: str | Path) -> Profile:
    """Load the profile at ``path`` (see module docs); raises :class:`ProfileError`."""
    path = Path(path)
    if not path.exists():
        raise ProfileError(f"{path}: no such file or directory")
    folders = raw_folders(path)
    if not folders:
        raise ProfileError(
            f"{path}: no msprof-py profile here (looked for {META_FILE}, {RAW_DIR}/ "
            f"and */{RAW_DIR}/)"
        )
    meta: dict[int, dict[str, Any]] = {}
    frames: dict[str, list[pd.DataFrame]] = {name: [] for name in TABLES}
    for folder in folders:
        try:
            info = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ProfileError(f"{folder / META_FILE}: unreadable ({exc})") from None
        rank = int(info.get("rank", 0))
        if rank in meta:
            raise ProfileError(f"{path}: two profiles for rank {rank}")
        meta[rank] = info
        for name in TABLES:
            df = _read_table(folder, name).to_pandas()
            df.insert(0, "rank", rank)
            frames[name].append(df)
    tables = {name: pd.concat(dfs, ignore_index=True) for name, dfs in frames.items()}
    return Profile(path, meta, tables)
