"""Writing a raw profile: rows buffered per table, flushed to Parquet in bounded chunks.

Every chunk is written atomically: to a temporary name, fsynced, then renamed into place, and
``meta.json`` is rewritten (the same way) to list it with its row count, size and CRC-32. A
crash therefore never leaves a part that looks complete but is not: what is listed was whole
on disk, and a reader can tell any later damage from it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import zlib
from array import array
from itertools import accumulate
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from msprof_py.profile.meta import fsync_dir, write_json_atomic, write_meta_file
from msprof_py.profile.part_queue import PartQueue
from msprof_py.profile.schema import META_FILE, TABLES, Table

__all__ = ["DEFAULT_CHUNK_ROWS", "RawWriter", "write_json_atomic", "write_meta_file"]

#: rows a table buffers before they go to disk (bounds the recorder's memory)
DEFAULT_CHUNK_ROWS = 65_536
#: buffered rows also go to disk when this many seconds passed since the last flush (checked
#: every :data:`CLOCK_EVERY` appended rows and at step ends): a hard crash (``os._exit``, a
#: segfault) loses at most about this much of the run
FLUSH_INTERVAL_S = 1.0
CLOCK_EVERY = 4096
#: ``meta.json`` lists every part, so writing it costs more as a run goes on (5,000 parts:
#: about 100 ms): once it lists more than this many parts per second of flush interval, the
#: interval grows with it, which keeps the metadata's share of a long run's time bounded
PARTS_PER_INTERVAL_S = 500


def _dictionary_columns(table: pa.Table) -> list[str]:
    """The columns worth dictionary-encoding: the strings (op names, shapes, dtypes repeat);
    ids and times are nearly all distinct, and a dictionary only costs time there."""
    return [
        f.name for f in table.schema if pa.types.is_string(f.type) or pa.types.is_dictionary(f.type)
    ]


#: each table's rows as one Arrow struct type (built once per table)
_STRUCTS: dict[str, pa.StructType] = {}
#: the compiled row buffers' column kind of each Arrow type
_KINDS = {pa.int64(): "q", pa.int32(): "i", pa.float64(): "d", pa.bool_(): "b", pa.string(): "s"}


def _rows_to_table(rows: list[tuple], table: Table) -> pa.Table:
    """Row tuples (schema order) as an Arrow table: converted row by row into one struct
    array (a pass over the rows in memory order; transposing them into Python column lists
    first cost as much as the conversion itself), then split into its columns."""
    struct = _STRUCTS.get(table.name)
    if struct is None:
        struct = _STRUCTS[table.name] = pa.struct(list(table.schema))
    return pa.Table.from_struct_array(pa.array(rows, type=struct))


def new_rows(table: Table, compiled: bool = True, capacity: int = 0) -> Any:
    """An empty row buffer for ``table``: the compiled columnar ``RowBuffer``
    (``msprof_py/device/native/rows_core.c``) where it is built and the table's column types
    allow, else a list of row tuples. Both take ``append(row)`` and ``len()``;
    :func:`take_table` empties either into an Arrow table. ``capacity``: the rows a compiled
    buffer's arrays are made for at its first row (a chunk's, so that they never regrow and
    copy; memory the rows do not reach is never touched)."""
    kinds = "".join(_KINDS.get(column.type, "?") for column in table.columns)
    if compiled and "?" not in kinds:
        from msprof_py.device import native

        core = native.load()
        if core is not None:
            return core.RowBuffer(kinds, capacity)
    return []


def _column_array(kind: pa.DataType, count: int, column: tuple) -> pa.Array:
    """One column of a compiled buffer's ``take()`` as an Arrow array (strings: dictionary
    encoded, the chunk's codes into its dictionary)."""
    data, valid, dictionary = column
    validity = None if valid is None else pa.py_buffer(valid)
    if dictionary is None:
        return pa.Array.from_buffers(kind, count, [validity, pa.py_buffer(data)])
    codes = pa.Array.from_buffers(pa.int32(), count, [validity, pa.py_buffer(data)])
    return pa.DictionaryArray.from_arrays(codes, _string_array(dictionary))


def _string_array(texts: list[str]) -> pa.Array:
    """``texts`` as an Arrow string array, built from its buffers: ``pa.array`` on a list
    imports pandas (to ask whether the list is a pandas object), which costs a recorded
    process about 0.2 s at its first flush."""
    encoded = [text.encode() for text in texts]
    offsets = array("q", accumulate(map(len, encoded), initial=0))
    if offsets[-1] >= 2**31:  # beyond 32-bit offsets: pyarrow's own conversion
        return pa.array(texts, type=pa.string())
    offsets = array("i", offsets)
    return pa.Array.from_buffers(
        pa.string(), len(encoded), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
    )


#: each table's schema with its string columns dictionary-encoded (what compiled buffers give)
_DICTIONARY_SCHEMAS: dict[str, pa.Schema] = {}


def _dictionary_schema(table: Table) -> pa.Schema:
    schema = _DICTIONARY_SCHEMAS.get(table.name)
    if schema is None:
        coded = pa.dictionary(pa.int32(), pa.string())
        schema = _DICTIONARY_SCHEMAS[table.name] = pa.schema(
            [f.with_type(coded) if pa.types.is_string(f.type) else f for f in table.schema],
            metadata=table.schema.metadata,
        )
    return schema


def take_table(rows: Any, table: Table) -> pa.Table:
    """Every row buffered in ``rows`` (from :func:`new_rows`) as an Arrow table, leaving it
    empty. Rows appended meanwhile by another thread stay for the next call. From a compiled
    buffer the string columns come dictionary-encoded; a part written from either reads back
    with the table's own types (parts do not store the Arrow schema)."""
    if isinstance(rows, list):
        taken = rows[: len(rows)]
        del rows[: len(taken)]
        return _rows_to_table(taken, table)
    count, columns = rows.take()
    arrays = [
        _column_array(column.type, count, taken)
        for column, taken in zip(table.columns, columns, strict=True)
    ]
    return pa.Table.from_arrays(arrays, schema=_dictionary_schema(table))


def _write_part(table: pa.Table, part: Path) -> dict[str, Any]:
    """Write ``table`` to ``part`` atomically; return what ``meta.json`` lists of it."""
    tmp = part.with_name(part.name + ".tmp")
    # written by path, not through a Python file object: no Python callback runs inside
    # pyarrow's C++ writer, so a signal handler (SIGTERM's SystemExit) never fires there
    try:
        strings = _dictionary_columns(table)
        pq.write_table(
            table,
            str(tmp),
            write_page_checksum=True,
            use_dictionary=strings,
            # min and max of strings cost a copy of every value; nothing reads them
            write_statistics=[n for n in table.column_names if n not in strings],
            # a string column reads back as a string whether it was written from a dictionary
            # (a compiled buffer's chunk) or not; Parquet's own types say the rest
            store_schema=False,
        )
    except OSError as exc:  # pyarrow's text is long; say it as the OS says it, with the file
        if not exc.errno:
            raise
        raise OSError(exc.errno, os.strerror(exc.errno), part.name) from exc
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
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

    The recording thread only takes a chunk's rows; a writer thread (:class:`PartQueue`)
    encodes and writes it, and lists it in ``meta.json`` at the next timed or final flush.
    ``flush`` waits for every part handed over; so does :meth:`drain`.
    """

    def __init__(
        self, folder: Path, meta: dict[str, Any], chunk_rows: int = DEFAULT_CHUNK_ROWS
    ) -> None:
        self.folder = folder
        self.chunk_rows = chunk_rows
        self.meta = dict(meta)
        self._rows: dict[str, Any] = {
            name: new_rows(table, capacity=chunk_rows) for name, table in TABLES.items()
        }
        self._parts: dict[str, int] = dict.fromkeys(TABLES, 0)
        self.meta["parts"] = {name: [] for name in TABLES}
        self.rows_written: dict[str, int] = dict.fromkeys(TABLES, 0)
        self.appended = 0
        #: why recording stopped (a full disk ...), or None while it works
        self.failed: str | None = None
        self._last_flush = time.monotonic()
        #: taking rows and numbering parts (threads that append and flush take turns)
        self._flush_lock = threading.RLock()
        #: the listing in ``meta`` (the writer thread adds parts while a flush writes it);
        #: never held while waiting for the writer thread
        self._list_lock = threading.RLock()
        #: a part was written since meta.json was last written (it does not list it yet)
        self._unlisted = False
        self._writes = PartQueue()

    def append(self, table: str, row: tuple) -> None:
        """Add one row; flush the table's chunk when it is full, and every buffered row when
        :data:`FLUSH_INTERVAL_S` passed. Never raises: if writing fails, recording stops."""
        if self.failed is not None:
            return
        rows = self._rows[table]
        try:
            rows.append(row)
        except (TypeError, ValueError, OverflowError) as exc:  # a compiled buffer checks types
            self._stop_recording(ValueError(f"a {table} row does not fit its columns: {exc}"))
            return
        self.appended += 1
        if len(rows) >= self.chunk_rows:
            # the full chunk goes to disk now; meta.json lists it at the next timed flush
            # (a crash before then still loads it: a partial profile reads unlisted parts)
            self._guarded(self._flush_table, table)
            self.flush_if_due()
        elif not self.appended % CLOCK_EVERY:
            self.flush_if_due()

    def direct_rows(self, table: str) -> Any:
        """The buffer of ``table``, for a compiled ``RowSink`` that writes rows into it
        itself; it calls :meth:`after_direct_rows` as it goes."""
        return self._rows[table]

    def after_direct_rows(self, table: str) -> bool:
        """A ``RowSink`` wrote rows into ``table``'s buffer (it calls this when the buffer
        holds a chunk, and every :data:`CLOCK_EVERY` rows): flush as :meth:`append` would.
        False once recording has stopped (the sink then writes nothing more)."""
        if self.failed is not None:
            return False
        self.appended += 1
        if len(self._rows[table]) >= self.chunk_rows:
            self._guarded(self._flush_table, table)
        self.flush_if_due()
        return self.failed is None

    def flush_interval(self) -> float:
        """Seconds between timed flushes: :data:`FLUSH_INTERVAL_S`, longer once ``meta.json``
        lists more than :data:`PARTS_PER_INTERVAL_S` parts per second of it."""
        listed = sum(self._parts.values())
        return FLUSH_INTERVAL_S * max(1.0, listed / (PARTS_PER_INTERVAL_S * FLUSH_INTERVAL_S))

    def flush_if_due(self) -> None:
        """Flush every buffered row if :meth:`flush_interval` passed since the last flush
        (the recorder calls it at step ends too). Never raises."""
        if self.failed is None and time.monotonic() - self._last_flush >= self.flush_interval():
            self._guarded(self._flush_buffers)

    def _flush_buffers(self, wait: bool = False, list_parts: bool = True) -> None:
        """Every buffered row handed to the writer thread, then ``meta.json`` rewritten once to
        list the parts written (``wait``: every part, once the writer thread wrote them; not
        ``list_parts``: the caller writes ``meta.json`` itself next)."""
        with self._flush_lock:
            for name in TABLES:
                self._flush_table(name)
        if wait:
            self.drain()
        self._raise_write_error()
        if list_parts:
            with self._flush_lock:
                if self._unlisted:
                    self.write_meta()
        self._last_flush = time.monotonic()

    def drain(self) -> None:
        """Wait until the writer thread wrote every part handed to it (on disk, not yet
        listed in ``meta.json``: the next flush lists them)."""
        self._writes.drain()

    def _raise_write_error(self) -> None:
        """The writer thread's error, raised here (recording then stops, see _guarded)."""
        error = self._writes.error
        if error is not None and self.failed is None:
            raise error

    def _guarded(self, write: Any, *args: Any) -> None:
        """Run ``write``; on any error stop recording with one warning (the profiled program
        runs on, and what was written before stays a loadable, partial profile)."""
        try:
            write(*args)
        except Exception as exc:
            self._stop_recording(exc)

    def _stop_recording(self, exc: BaseException) -> None:
        if isinstance(exc, OSError) and exc.strerror:
            reason = exc.strerror + (f" ({exc.filename})" if exc.filename else "")
        else:
            reason = " ".join(str(exc).split()) or type(exc).__name__
        self.failed = reason
        self._rows = {name: new_rows(table) for name, table in TABLES.items()}
        written = sum(self.rows_written.values())
        print(
            f"msprof: warning: recording stopped: {reason}; the application runs on, and the "
            f"{written:,} rows written so far stay a loadable (partial) profile",
            file=sys.stderr,
        )
        # say so in meta.json, now if there is room for it, else in the final write at exit
        # (a meta.json written later without it would claim a complete profile)
        self.meta["recording_error"] = reason
        with contextlib.suppress(Exception):
            self.write_meta()

    def _flush_table(self, name: str) -> None:
        """Write the buffered rows of ``name`` as its next part (``meta.json`` lists it at the
        next timed or final flush, once for all parts written meanwhile)."""
        # other threads (autograd's, a DataLoader's, the SIGTERM watchdog) append and flush
        # too: flushes take turns, and each writes the rows buffered when it started (rows
        # appended meanwhile stay for the next part), so meta.json counts what the parts hold
        with self._flush_lock:
            rows = self._rows[name]
            if not len(rows):
                return
            self._raise_write_error()
            if not self.folder.exists():
                self.write_meta()
            taken = take_table(rows, TABLES[name])
            part = self.folder / f"{name}-{self._parts[name]:05d}.parquet"
            self._parts[name] += 1
            self._writes.submit(lambda: self._write_and_list(name, taken, part))

    def _write_and_list(self, name: str, taken: pa.Table, part: Path) -> None:
        """On the writer thread: write part ``part`` of table ``name``, then add it to the
        listing the next ``meta.json`` holds."""
        listed = _write_part(taken, part)
        with self._list_lock:
            self.meta["parts"][name].append(listed)
            self.rows_written[name] += taken.num_rows
            self.meta["rows"] = dict(self.rows_written)  # counts always match the listed parts
            self._unlisted = True

    def flush(self) -> None:
        """Write every buffered row and the metadata (nothing at all if no row ever came).

        Never raises: a failed write stops recording with one warning (see ``failed``)."""
        if not self.appended and not any(len(rows) for rows in self._rows.values()):
            return
        if self.failed is not None:  # the final status, if there is room for it now
            with contextlib.suppress(Exception):
                self.write_meta()
            return
        self._guarded(self._flush_buffers, True, False)
        if self.failed is None:  # one write: the parts just written and the final fields
            with self._list_lock:
                self.meta["rows"] = dict(self.rows_written)
                self._guarded(self.write_meta)

    def write_meta(self) -> None:
        """(Re)write ``meta.json``, sealed with its checksum (creating the folder on first
        use)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with self._list_lock:
            write_meta_file(self.folder / META_FILE, self.meta)
            self._unlisted = False
