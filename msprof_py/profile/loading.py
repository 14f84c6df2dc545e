"""Loading stored profiles: ``msprof_py.load(path)``.

A path may be a run's output folder (one ``*_ascend_pt`` folder per rank), one rank's
``*_ascend_pt`` folder, or a raw profile folder itself. Tables of all ranks are concatenated
with a ``rank`` column; ``Profile.for_rank(r)`` narrows to one rank.

Loading validates everything it reads (:mod:`msprof_py.profile.meta` checks ``meta.json``,
:mod:`msprof_py.profile.parts` every Parquet part); a violation is one :class:`ProfileError`
naming the file and what is wrong. A profile the recorder never finished (status ``running`` or
``killed``, or no ``meta.json`` at all) is *partial*: it loads up to its last complete part,
and :attr:`Profile.warnings` names what was dropped.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from msprof_py.profile.errors import ProfileError, ProfileWarning
from msprof_py.profile.meta import (
    META_LIMIT_BYTES,
    UNFINISHED,
    MetaError,
    parse_meta,
    seal_ok,
)
from msprof_py.profile.parts import (
    Part,
    PartError,
    index_of,
    open_part,
    part_files,
    read_column,
    unfinished_files,
)
from msprof_py.profile.schema import META_FILE, RAW_DIR, TABLES, default_row


@dataclass
class Profile:
    """A loaded profile: per-table DataFrames (with ``rank``) and per-rank metadata.

    ``partial``: the recorder of some rank never finished (its last rows may be missing);
    ``warnings``: what loading noticed (one line each)."""

    path: Path
    meta: dict[int, dict[str, Any]]
    tables: dict[str, pd.DataFrame] = field(repr=False)
    warnings: list[str] = field(default_factory=list)
    partial: bool = False

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

    def table(self, name: str) -> pd.DataFrame:
        """The table ``name``; empty (its schema's columns and ``rank``) when the profile has
        none (a profile built by hand without graph tables ...)."""
        found = self.tables.get(name)
        if found is None:
            found = empty_table(name)
        return found

    @property
    def graphs(self) -> pd.DataFrame:
        """Compiled graphs, one row per plan (empty for eager runs and older profiles)."""
        return self.table("graphs")

    @property
    def graph_passes(self) -> pd.DataFrame:
        """What the graph passes tried, per plan."""
        return self.table("graph_passes")

    @property
    def graph_kernels(self) -> pd.DataFrame:
        """The kernels each graph plan launches."""
        return self.table("graph_kernels")

    @property
    def measured_waits(self) -> pd.DataFrame:
        """Real wall time of the data-loading ranges, measured on the recording host and kept
        out of the timeline (empty for older and imported profiles)."""
        return self.table("measured_waits")

    def thread_names(self, rank: int) -> dict[int, str]:
        """The name of each host thread of ``rank`` that recorded something (``MainThread``,
        ``pt_autograd_0`` ...), by its ``host_events.thread`` value; empty for a profile
        recorded before names were (readers then guess a thread's role from its ops)."""
        names = self.meta.get(rank, {}).get("threads") or {}
        return {int(thread): str(name) for thread, name in names.items()}

    def __repr__(self) -> str:
        """One line, whatever the size of the profile (a REPL prints it)."""
        statuses = sorted({str(m.get("status", "?")) for m in self.meta.values()})
        ranks = ", ".join(str(r) for r in self.ranks)
        rows = ", ".join(
            f"{len(self.tables[name]):,} {name.replace('_', ' ')}"
            for name in ("tasks", "host_events", "steps")
            if name in self.tables
        )
        flags = f", {'/'.join(statuses)}" + (", partial" if self.partial else "")
        plural = "s" if len(self.ranks) != 1 else ""
        return f"<Profile {str(self.path)!r}: rank{plural} {ranks}, {rows}{flags}>"

    def for_rank(self, rank: int) -> Profile:
        """The same profile narrowed to ``rank``."""
        if rank not in self.meta:
            raise ProfileError(f"{self.path}: no rank {rank} (ranks: {self.ranks})")
        tables = {
            name: df[df["rank"] == rank].reset_index(drop=True) for name, df in self.tables.items()
        }
        return Profile(
            self.path, {rank: self.meta[rank]}, tables, list(self.warnings), self.partial
        )


def empty_table(name: str) -> pd.DataFrame:
    """An empty frame of table ``name``: a ``rank`` column, then the schema's columns."""
    df = TABLES[name].schema.empty_table().to_pandas()
    df.insert(0, "rank", pd.Series(dtype="int64"))
    return df


def _is_raw(folder: Path) -> bool:
    """Whether ``folder`` is a raw profile folder (its meta.json, or parts without one)."""
    if (folder / META_FILE).exists():
        return True
    if folder.name != RAW_DIR or not folder.is_dir():
        return False
    return any(folder.glob("*-00000.parquet")) or any(folder.glob("*.parquet.tmp"))


def raw_folders(path: Path) -> list[Path]:
    """Raw profile folders at or below ``path`` (at most two levels down)."""
    if _is_raw(path):
        return [path]
    if _is_raw(path / RAW_DIR):
        return [path / RAW_DIR]
    found = sorted(p for p in path.glob(f"*/{RAW_DIR}") if _is_raw(p))
    return found


def looked_for() -> str:
    """What :func:`load` looks for at a path, for the "no profile here" messages: msprof-py's
    raw folders and each importer's files."""
    from msprof_py.importers import importers

    foreign = "".join(f"; {i.name}: {i.looks_for or 'its files'}" for i in importers())
    return f"msprof-py's {META_FILE}, {RAW_DIR}/ and */{RAW_DIR}/{foreign}"


def _neutral(table: str, column: pa.Field, rows: int) -> pa.Array:
    """A column the part was written without (an older format): its neutral value."""
    return pa.repeat(pa.scalar(default_row(table)[column.name], column.type), rows)


@dataclass
class _Folder:
    """One raw folder as read: its rank, metadata, checked parts and what loading noticed."""

    folder: Path
    rank: int
    meta: dict[str, Any]
    partial: bool
    parts: dict[str, list[Part]]
    warnings: list[str]


def _read_meta(folder: Path) -> tuple[dict[str, Any], list[str]]:
    """The validated ``meta.json`` of ``folder`` and warnings; a folder of parts without one
    is a partial profile of rank 0 (the recorder died before it wrote it)."""
    path = folder / META_FILE
    if not path.exists():
        return {"rank": 0, "status": "running"}, [
            f"{path} is missing (the recorder died before writing it?): partial profile, "
            "read as rank 0 from its part files"
        ]
    try:
        if not path.is_file():
            raise ProfileError(f"{path} is not a file")
        size = path.stat().st_size
        if size > META_LIMIT_BYTES:
            raise MetaError(f"is {size} bytes, more than a meta.json can be ({META_LIMIT_BYTES})")
        info = parse_meta(path.read_bytes())
    except MetaError as exc:
        raise ProfileError(f"{path} {exc}") from None
    except OSError as exc:
        raise ProfileError(f"{path} cannot be read ({exc.strerror or exc})") from None
    notes = []
    if seal_ok(info) is False:
        notes.append(
            f"{path} was edited after recording (its checksum does not match): figures taken "
            "from it may not be what was recorded"
        )
    return info, notes


def _open_folder(folder: Path, categorical: bool) -> _Folder:
    """Read and check ``folder``'s metadata and every part (no column read yet)."""
    info, notes = _read_meta(folder)
    partial = info.get("status") in UNFINISHED
    if partial and "status" in info and (folder / META_FILE).exists():
        notes.append(
            f"{folder}: the recorder never finished (status {info['status']}): partial "
            "profile, its last rows may be missing"
        )
    if info.get("recording_error"):
        partial = True
        notes.append(
            f"{folder}: recording stopped early ({info['recording_error']}): partial profile, "
            "the rows after that point were not written"
        )
    for tmp in unfinished_files(folder):
        if tmp.name != f"{META_FILE}.tmp":
            notes.append(f"{tmp} is a chunk the run was writing when it ended: dropped")
    parts: dict[str, list[Part]] = {}
    listed_all = info.get("parts") or {}
    rows = info.get("rows") or {}
    for name, table in TABLES.items():
        strings = [c.name for c in table.columns if pa.types.is_string(c.type)]
        listed = listed_all.get(name)
        files = part_files(folder, name)
        opened: list[Part] = []
        for i, path in enumerate(files):
            recorded = listed[i] if listed is not None and i < len(listed) else None
            if index_of(path) != i:
                gap = folder / f"{name}-{i:05d}.parquet"
                if partial and recorded is None:
                    dropped = ", ".join(p.name for p in files[i:])
                    notes.append(f"{gap} is missing: partial profile, dropped {dropped}")
                    break
                raise ProfileError(f"{gap} is missing (later parts of {name} exist)")
            if listed is not None and recorded is None and not partial:
                raise ProfileError(
                    f"{path} is not among the parts {folder / META_FILE} lists (left over from "
                    "another run, or copied in?)"
                )
            try:
                opened.append(open_part(path, name, recorded, strings if categorical else None))
            except PartError as exc:
                if partial and recorded is None:
                    dropped = ", ".join(p.name for p in files[i:])
                    notes.append(
                        f"{exc}; partial profile: loaded up to the part before, dropped {dropped}"
                    )
                    break
                raise ProfileError(str(exc)) from None
        if listed is not None and len(files) < len(listed) and len(opened) == len(files):
            gone = folder / str(listed[len(files)]["file"])
            raise ProfileError(
                f"{gone} is missing ({folder / META_FILE} lists {len(listed)} parts of {name})"
            )
        if not partial and name in rows:
            held = sum(p.rows for p in opened)
            if held != rows[name]:
                raise ProfileError(
                    f"{folder}: {META_FILE} records {rows[name]} rows of {name}, its parts hold "
                    f"{held} (a part is missing, extra or was replaced)"
                )
        parts[name] = opened
    return _Folder(folder, int(info["rank"]), info, partial, parts, notes)


def _read_table(
    loaded: _Folder, name: str, categorical: bool = False, columns: Sequence[str] | None = None
) -> pd.DataFrame:
    """The table ``name`` of one raw folder (all its parts), column by column: only one
    column is ever held twice (as Arrow and as pandas). ``categorical``: strings as
    categoricals (read dictionary-encoded, never as one Python string per row)."""
    schema = TABLES[name].schema
    if columns is not None:
        wanted_names = set(columns)
        schema = pa.schema([f for f in schema if f.name in wanted_names])
    strings = [f.name for f in schema if pa.types.is_string(f.type)]
    parts = loaded.parts[name]
    read: dict[str, pd.Series] = {}
    for col in schema:
        chunks = []
        for part in parts:
            if col.name in part.file.schema_arrow.names:
                got = read_column(part, col.name)
                count = sum(len(c) for c in got)
                nulls = sum(c.null_count for c in got)
                if count != part.rows or nulls:
                    what = f"{nulls} null values" if nulls else f"{count} rows of {part.rows}"
                    raise ProfileError(f"{part.path} column {col.name!r} holds {what}")
                chunks += got
            else:
                chunks.append(_neutral(name, col, part.rows))
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
    older format) read as their neutral value (:func:`~msprof_py.profile.schema.default_row`).

    Whatever is wrong with the files (``meta.json`` against its schema, each Parquet part's
    footer, types, columns and row counts) raises :class:`ProfileError` naming the file; what
    loaded anyway (a partial profile) is in :attr:`Profile.warnings`, each also issued as a
    :class:`ProfileWarning`."""
    path = Path(path)
    if not path.exists():
        raise ProfileError(f"{path}: no such file or directory")
    folders = raw_folders(path)
    if not folders:
        from msprof_py.importers import find

        importer = find(path)
        if importer is not None:
            return importer.load(path)
        raise ProfileError(f"{path}: no profile here (looked for {looked_for()})")
    meta: dict[int, dict[str, Any]] = {}
    notes: list[str] = []
    opened = []
    for folder in folders:
        one = _open_folder(folder, categorical)
        if one.rank in meta:
            raise ProfileError(f"{path}: two profiles for rank {one.rank} (the second: {folder})")
        meta[one.rank] = one.meta
        notes += one.warnings
        opened.append(one)
    frames: dict[str, list[pd.DataFrame]] = {name: [] for name in TABLES}
    for one in opened:
        for name in TABLES:
            df = _read_table(one, name, categorical, (columns or {}).get(name))
            df.insert(0, "rank", one.rank)
            frames[name].append(df)
    tables = {
        name: dfs[0] if len(dfs) == 1 else pd.concat(_union_categoricals(dfs), ignore_index=True)
        for name, dfs in frames.items()
    }
    for note in notes:
        warnings.warn(note, ProfileWarning, stacklevel=2)
    return Profile(path, meta, tables, notes, any(one.partial for one in opened))
