"""Writing a raw profile: rows buffered per table, flushed to Parquet in bounded chunks."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from msprof_py.profile.schema import META_FILE, TABLES, Table

#: rows a table buffers before they go to disk (bounds the recorder's memory)
DEFAULT_CHUNK_ROWS = 65_536


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so a reader never sees a half-written file (write, then rename)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str), encoding="utf-8")
    os.replace(tmp, path)


class RawWriter:
    """Appends rows to the tables of one raw profile folder.

    Rows are tuples in the column order of :mod:`msprof_py.profile.schema`. Every
    ``chunk_rows`` rows of a table become one Parquet part file, so memory stays bounded and a
    crash loses at most the rows not yet flushed (``flush`` is called on every exit path). The
    folder is created with the first data: a process that records nothing leaves nothing.
    """

    def __init__(
        self, folder: Path, meta: dict[str, Any], chunk_rows: int = DEFAULT_CHUNK_ROWS
    ) -> None:
        self.folder = folder
        self.chunk_rows = chunk_rows
        self.meta = dict(meta)
        self._rows: dict[str, list[tuple]] = {name: [] for name in TABLES}
        self._parts: dict[str, int] = dict.fromkeys(TABLES, 0)
        self.rows_written: dict[str, int] = dict.fromkeys(TABLES, 0)
        self.appended = 0

    def append(self, table: str, row: tuple) -> None:
        """Add one row; flush the table's chunk when it is full."""
        rows = self._rows[table]
        rows.append(row)
        self.appended += 1
        if len(rows) >= self.chunk_rows:
            self._flush_table(table)

    def _flush_table(self, name: str) -> None:
        rows = self._rows[name]
        if not rows:
            return
        if not self.folder.exists():
            self.write_meta()
        table: Table = TABLES[name]
        columns = list(zip(*rows, strict=True))
        arrays = [pa.array(col, type=c.type) for col, c in zip(columns, table.columns, strict=True)]
        part = self.folder / f"{name}-{self._parts[name]:05d}.parquet"
        tmp = part.with_name(part.name + ".tmp")
        pq.write_table(pa.Table.from_arrays(arrays, schema=table.schema), tmp)
        os.replace(tmp, part)
        self._parts[name] += 1
        self.rows_written[name] += len(rows)
        self._rows[name] = []

    def flush(self) -> None:
        """Write every buffered row and the metadata (nothing at all if no row ever came)."""
        if not self.appended:
            return
        for name in TABLES:
            self._flush_table(name)
        self.meta["rows"] = dict(self.rows_written)
        self.write_meta()

    def write_meta(self) -> None:
        """(Re)write ``meta.json`` (creating the folder on first use)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.folder / META_FILE, self.meta)
