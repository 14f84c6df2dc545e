"""Loading stored profiles: ``msprof_py.load(path)``.

A path may be a run's output folder (one ``*_ascend_pt`` folder per rank), one rank's
``*_ascend_pt`` folder, or a raw profile folder itself. Tables of all ranks are concatenated
with a ``rank`` column; ``Profile.for_rank(r)`` narrows to one rank.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from msprof_py.profile.schema import META_FILE, RAW_DIR, TABLES, default_row


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


def _neutral(table: str, column: pa.Field, rows: int) -> pa.Array:
    """A column the part was written without (an older format): its neutral value."""
    return pa.repeat(pa.scalar(default_row(table)[column.name], column.type), rows)


def _read_table(
    folder: Path, name: str, categorical: bool = False, columns: Sequence[str] | None = None
) -> pd.DataFrame:
    """The table ``name`` of one raw folder (all its parts), column by column: only one
    column is ever held twice (as Arrow and as pandas). ``categorical``: strings as
    categoricals (read dictionary-encoded, never as one Python string per row)."""
    schema = TABLES[name].schema
    if columns is not None:
        wanted_names = set(columns)
        schema = pa.schema([f for f in schema if f.name in wanted_names])
    strings = [f.name for f in schema if pa.types.is_string(f.type)]
    parts = [
        pq.ParquetFile(p, read_dictionary=strings if categorical else None)
        for p in sorted(folder.glob(f"{name}-*.parquet"))
    ]
    read: dict[str, pd.Series] = {}
    for col in schema:
        chunks = []
        for part in parts:
            if col.name in part.schema_arrow.names:
                chunks += part.read(columns=[col.name], use_threads=False).column(0).chunks
            else:
                chunks.append(_neutral(name, col, part.metadata.num_rows))
        wanted = col.type
        if categorical and col.name in strings:
            wanted = pa.dictionary(pa.int32(), pa.string())
        chunks = [_cast(c, wanted) for c in chunks]
        column = pa.chunked_array(chunks, type=wanted).to_pandas()
        del chunks
        if categorical and col.name in strings:
            column = _sorted_categories(column)
        read[col.name] = column
    return pd.DataFrame(read, columns=schema.names, copy=False)


def _cast(chunk: pa.Array, wanted: pa.DataType) -> pa.Array:
    if chunk.type == wanted:
        return chunk
    if pa.types.is_dictionary(wanted):
        if pa.types.is_dictionary(chunk.type):
            chunk = chunk.cast(pa.string())
        return chunk.cast(pa.string()).dictionary_encode()
    return chunk.cast(wanted)


def _sorted_categories(column: pd.Series) -> pd.Series:
    """Categories sorted and only those used, as ``astype("category")`` makes them (group-bys
    on a categorical come out in category order)."""
    cats = column.cat.categories
    codes = column.cat.codes.to_numpy()
    ordered = cats[np.unique(codes[codes >= 0])].sort_values()
    plain = pa.array([], pa.string()).to_pandas().dtype  # what strings load as without
    if ordered.dtype != plain:
        ordered = ordered.astype(plain)
    elif ordered.equals(cats):
        return column
    return column.cat.set_categories(ordered)


def _union_categoricals(frames: list[pd.DataFrame]) -> list[pd.DataFrame]:
    """Frames whose categorical columns share one (sorted) category list, so that
    concatenating them keeps the columns categorical."""
    if len(frames) < 2:
        return frames
    out = [f.copy(deep=False) for f in frames]
    for c in frames[0].columns:
        if not isinstance(frames[0][c].dtype, pd.CategoricalDtype):
            continue
        union = sorted(set().union(*(set(f[c].cat.categories) for f in frames)))
        cats = pd.Index(union, dtype=frames[0][c].cat.categories.dtype)
        for f in out:
            f[c] = f[c].cat.set_categories(cats)
    return out


def load(
    path: str | Path,
    *,
    categorical: bool = False,
    columns: Mapping[str, Sequence[str]] | None = None,
) -> Profile:
    """Load the profile at ``path`` (see module docs); raises :class:`ProfileError`.

    ``categorical``: string columns as pandas categoricals with sorted categories (what
    :func:`msprof_py.analyze` works on: a few bytes a row instead of a Python string), read
    straight from Parquet's dictionary encoding. ``columns``: per table, the columns to read
    (in schema order; tables not named are read whole). Columns a part was written without (an
    older format) read as their neutral value (:func:`~msprof_py.profile.schema.default_row`)."""
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
            df = _read_table(folder, name, categorical, (columns or {}).get(name))
            df.insert(0, "rank", rank)
            frames[name].append(df)
    tables = {
        name: dfs[0] if len(dfs) == 1 else pd.concat(_union_categoricals(dfs), ignore_index=True)
        for name, dfs in frames.items()
    }
    return Profile(path, meta, tables)
