"""Writing a raw profile: rows buffered per table, flushed to Parquet in bounded chunks.

Every chunk is written atomically: to a temporary name, fsynced, then renamed into place, and
``meta.json`` is rewritten (the same way) to list it with its row count, size and CRC-32. A
crash therefore never leaves a part that looks complete but is not: what is listed was whole
on disk, and a reader can tell any later damage from it.
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from msprof_py.profile.meta import fsync_dir, write_json_atomic, write_meta_file
from msprof_py.profile.schema import META_FILE, TABLES, Table

__all__ = ["DEFAULT_CHUNK_ROWS", "RawWriter", "write_json_atomic", "write_meta_file"]

#: rows a table buffers before they go to disk (bounds the recorder's memory)
DEFAULT_CHUNK_ROWS = 65_536


def _write_part(table: pa.Table, part: Path) -> dict[str, Any]:
    """Write ``table`` to ``part`` atomically; return what ``meta.json`` lists of it."""
    tmp = part.with_name(part.name + ".tmp")
    with open(tmp, "wb") as f:
        pq.write_table(table, f, write_page_checksum=True)
        f.flush()
        os.fsync(f.fileno())
    crc = 0
    with open(tmp, "rb") as f:
        while block := f.read(1 << 20):
            crc = zlib.crc32(block, crc)
    size = tmp.stat().st_size
    os.replace(tmp, part)
    fsync_dir(part.parent)
    return {"file": part.name, "rows": table.num_rows, "bytes": size, "crc32": crc}


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
        self.meta["parts"] = {name: [] for name in TABLES}
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
        listed = _write_part(pa.Table.from_arrays(arrays, schema=table.schema), part)
        self.meta["parts"][name].append(listed)
        self._parts[name] += 1
        self.rows_written[name] += len(rows)
        self._rows[name] = []
        self.write_meta()  # list the part: a crash from now on keeps it

    def flush(self) -> None:
        """Write every buffered row and the metadata (nothing at all if no row ever came)."""
        if not self.appended:
            return
        for name in TABLES:
            self._flush_table(name)
        self.meta["rows"] = dict(self.rows_written)
        self.write_meta()

    def write_meta(self) -> None:
        """(Re)write ``meta.json``, sealed with its checksum (creating the folder on first
        use)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        write_meta_file(self.folder / META_FILE, self.meta)
