"""Importers: profiles msprof-py did not record, loaded as the same :class:`Profile`.

:func:`msprof_py.load` reads msprof-py's own raw folders first; a path holding none is offered
to each importer in turn (a real torch_npu ``*_ascend_pt`` folder, msprof's ``PROF_*`` output,
a PyTorch profiler ``*.pt.trace.json[.gz]``). An importer is a module of this package that calls
:func:`register` at import with a ``detect(path) -> bool`` and a ``load(path) -> Profile``;
:func:`build_profile` turns the frames it read into a Profile whose tables have every schema
column (the ones the source format lacks at their neutral values), so that the analysers,
report, gates and exporters run on it unchanged. Torch-free, like the rest of the analysis side.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from msprof_py.profile.loading import Profile, empty_table
from msprof_py.profile.schema import TABLES, default_row

#: importer modules of this package, tried in this order
BUILTIN = ("msprof_py.importers.ascend", "msprof_py.importers.kineto")


@dataclass(frozen=True)
class Importer:
    """One foreign format: ``name`` (as messages and ``meta["source_format"]`` say it),
    ``detect`` (cheap: looks at names and the first bytes only) and ``load``; ``looks_for``
    says what ``detect`` looks for (the "no profile here" message lists it)."""

    name: str
    detect: Callable[[Path], bool]
    load: Callable[[Path], Profile]
    looks_for: str = ""


_REGISTERED: list[Importer] = []


def register(importer: Importer) -> Importer:
    """Add ``importer`` (called by the importer modules at import)."""
    if all(existing.name != importer.name for existing in _REGISTERED):
        _REGISTERED.append(importer)
    return importer


def importers() -> list[Importer]:
    """Every registered importer, the built-in ones imported first."""
    for module in BUILTIN:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
    return list(_REGISTERED)


def find(path: Path) -> Importer | None:
    """The importer that reads ``path``, or None."""
    for importer in importers():
        if importer.detect(path):
            return importer
    return None


def _column(frame: pd.DataFrame, table: str, name: str, kind: pa.DataType) -> pd.Series:
    """Column ``name`` of ``frame`` in the dtype msprof-py's loader gives it (absent: its
    neutral value)."""
    if name in frame.columns:
        values = frame[name]
    else:
        values = pd.Series([default_row(table)[name]] * len(frame), index=frame.index)
    if pa.types.is_string(kind):
        return values.fillna("").astype(str).astype(object)
    if pa.types.is_boolean(kind):
        return values.fillna(False).astype(bool)
    if pa.types.is_floating(kind):
        return pd.to_numeric(values, errors="coerce").fillna(0.0).astype("float64")
    neutral = default_row(table)[name]
    numbers = pd.to_numeric(values, errors="coerce").fillna(neutral)
    return numbers.astype("int32" if kind == pa.int32() else "int64")


def normalise_table(table: str, frame: pd.DataFrame | None, rank: int) -> pd.DataFrame:
    """``frame`` as loaded profiles hold table ``table``: ``rank`` first, then every schema
    column in order and type; columns the frame lacks take their neutral values."""
    if frame is None or frame.empty:
        out = empty_table(table)
        return out
    columns = {"rank": pd.Series(rank, index=frame.index, dtype="int64")}
    for column in TABLES[table].columns:
        columns[column.name] = _column(frame, table, column.name, column.type)
    return pd.DataFrame(columns).reset_index(drop=True)


def build_profile(
    path: Path,
    ranks: Mapping[int, tuple[dict[str, Any], Mapping[str, pd.DataFrame]]],
    warnings: list[str] | None = None,
) -> Profile:
    """A Profile from per-rank ``(meta, {table: frame})`` an importer read. Every table of the
    schema is present (empty when the source has none); ``meta`` should say
    ``source_format`` (the importer's name) and ``status`` (``complete`` unless the source was
    cut short)."""
    metas: dict[int, dict[str, Any]] = {}
    frames: dict[str, list[pd.DataFrame]] = {name: [] for name in TABLES}
    for rank in sorted(ranks):
        meta, tables = ranks[rank]
        metas[rank] = {"rank": rank, "status": "complete", **meta}
        for name in TABLES:
            frames[name].append(normalise_table(name, tables.get(name), rank))
    joined = {
        name: dfs[0] if len(dfs) == 1 else pd.concat(dfs, ignore_index=True)
        for name, dfs in frames.items()
    }
    partial = any(m.get("status") in ("running", "killed") for m in metas.values())
    return Profile(path, metas, joined, list(warnings or []), partial)
