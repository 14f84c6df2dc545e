"""Chrome trace events as text, built column-wise with Arrow (fast for millions of events).

An event is a JSON object assembled from fields: constants are one JSON text, varying fields
are Arrow string arrays of JSON texts (already encoded). :func:`objects` joins them element-wise
in Arrow's C++ kernels, and :func:`write_array` streams the resulting buffers to a file, so no
Python string is built per event. Strings are JSON-encoded once per distinct value.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import IO, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

Text = pa.Array  # an Arrow string array
Column = Text | str
_NEEDS_ESCAPE = r'["\\\x00-\x1f\x7f-\x{10ffff}]'
#: rows per Arrow text array (keeps every array far below the 2 GiB string offset limit)
SLICE_ROWS = 1 << 18


def _values(values: Any) -> Any:
    if isinstance(values, pd.Series) and not isinstance(values.dtype, pd.ArrowDtype):
        return values.to_numpy()
    return values


def series(arr: Text) -> pd.Series:
    """An Arrow string array as a pandas Series (no copy)."""
    return pd.Series(pd.arrays.ArrowExtensionArray(arr))


def jstr(values: Iterable[Any] | pd.Series | np.ndarray) -> Text:
    """JSON string literals of ``values`` (quoted directly when nothing needs escaping, else
    one ``json.dumps`` per distinct value)."""
    series = values if isinstance(values, pd.Series) else pd.Series(_values(values), dtype=object)
    series = series.astype(str)
    arr = text(series)
    if len(arr) and not pc.any(pc.match_substring_regex(arr, _NEEDS_ESCAPE)).as_py():
        return jquote(arr)
    codes, uniques = pd.factorize(series, use_na_sentinel=False)
    encoded = pa.array([json.dumps(str(u), ensure_ascii=False) for u in uniques], pa.string())
    return encoded.take(pa.array(codes, pa.int64())) if len(codes) else pa.array([], pa.string())


def text(values: Iterable[Any] | pd.Series | np.ndarray | Text) -> Text:
    """Values as an Arrow string array (numbers formatted by Arrow)."""
    if isinstance(values, pa.Array):
        return values if values.type == pa.string() else pc.cast(values, pa.string())
    if isinstance(values, pd.Series) and values.dtype != object:
        arr = pa.array(values)
    else:
        arr = pa.array(_values(values))
    return arr if arr.type == pa.string() else pc.cast(arr, pa.string())


def jquote(values: Iterable[Any] | pd.Series | Text) -> Text:
    """JSON string literals of values that need no escaping (digits, timestamps, ids)."""
    return pc.binary_join_element_wise('"', text(values), '"', "")


def jint(values: Iterable[int] | pd.Series | np.ndarray) -> Text:
    """JSON integer texts."""
    return pc.cast(pa.array(np.asarray(_values(values), dtype=np.int64)), pa.string())


def jnum(values: Iterable[float] | pd.Series | np.ndarray) -> Text:
    """JSON number texts of finite floats."""
    return pc.cast(pa.array(np.asarray(_values(values), dtype=np.float64)), pa.string())


def us_text(ns: Iterable[int] | pd.Series | np.ndarray) -> Text:
    """Nanoseconds as exact microsecond text with 3 decimals (``12345`` -> ``"12.345"``)."""
    values = np.asarray(_values(ns), dtype=np.int64)
    sign = np.where(values < 0, "-", "")
    q, r = np.divmod(np.abs(values), 1000)
    digits = pc.binary_join_element_wise(jint(q), pc.utf8_lpad(jint(r), width=3, padding="0"), ".")
    if not (values < 0).any():
        return digits
    return pc.binary_join_element_wise(pa.array(sign, pa.string()), digits, "")


def const(value: Any) -> str:
    """A constant field value as JSON text."""
    return json.dumps(value, ensure_ascii=False)


def objects(fields: dict[str, Column], n: int) -> Text:
    """``n`` JSON objects; each field is one JSON text (constant) or ``n`` JSON texts."""
    parts: list[Column] = []
    literal = "{"
    for i, (key, value) in enumerate(fields.items()):
        literal += ("," if i else "") + json.dumps(key, ensure_ascii=False) + ":"
        if isinstance(value, str):
            literal += value
            continue
        if len(value) != n:
            raise ValueError(f"field {key!r}: {len(value)} values for {n} events")
        parts += [literal, value]
        literal = ""
    literal += "}"
    if not n:
        return pa.array([], pa.string())
    if not parts:
        return pa.array([literal] * n, pa.string())
    return concat(*parts, literal)


def concat(*parts: Column) -> Text:
    """Element-wise concatenation of string arrays and constants."""
    arrays = [p if isinstance(p, str) else text(p) for p in parts]
    return pc.binary_join_element_wise(*arrays, "")


def metadata(pid: int, name: str, labels: str | None, sort_index: int) -> Text:
    """process_name / process_labels / process_sort_index events of one process."""
    events = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}}]
    if labels is not None:
        events.append(
            {"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "args": {"labels": labels}}
        )
    events.append(
        {
            "ph": "M",
            "name": "process_sort_index",
            "pid": pid,
            "tid": 0,
            "args": {"sort_index": sort_index},
        }
    )
    return pa.array([json.dumps(e, ensure_ascii=False) for e in events], pa.string())


def thread_metadata(pid: int, threads: Iterable[tuple[int, str, int]]) -> Text:
    """thread_name / thread_sort_index events for ``(tid, name, sort_index)`` triples."""
    out = []
    for tid, name, sort_index in threads:
        for kind, args in (("thread_name", {"name": name}), ("thread_sort_index", None)):
            args = args if args is not None else {"sort_index": sort_index}
            event = {"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": args}
            out.append(json.dumps(event, ensure_ascii=False))
    return pa.array(out, pa.string())


def utf8_bytes(arr: Text) -> memoryview:
    """The UTF-8 bytes of a string array (its data buffer, as Arrow lays it out)."""
    arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    if not len(arr):
        return memoryview(b"")
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)
    start, end = int(offsets[arr.offset]), int(offsets[arr.offset + len(arr)])
    return memoryview(arr.buffers()[2])[start:end]


class ArrayWriter:
    """Streams event texts into a file as one bare JSON array."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self.count = 0
        stream.write(b"[")

    def write(self, events: Text) -> None:
        """Append events (an Arrow string array of JSON objects)."""
        emit([self], events)

    def _write(self, data: memoryview, n: int) -> None:
        self.stream.write(data if self.count else data[1:])  # no comma before the first
        self.count += n

    def close(self) -> None:
        """End the array (the stream stays open)."""
        self.stream.write(b"\n]\n")


def emit(writers: Sequence[ArrayWriter], events: Text) -> None:
    """Append the same events to several arrays (the text is built once)."""
    for lo in range(0, len(events), SLICE_ROWS):
        part = events.slice(lo, SLICE_ROWS)
        data = utf8_bytes(pc.binary_join_element_wise(",\n", part, ""))
        for writer in writers:
            writer._write(data, len(part))


def write_array(stream: IO[bytes], chunks: Iterable[Text]) -> int:
    """Write event texts as one bare JSON array; returns the number of events."""
    writer = ArrayWriter(stream)
    for chunk in chunks:
        writer.write(chunk)
    writer.close()
    return writer.count
