"""Opening the Parquet part files of a raw profile defensively.

Every part is checked before a value is read from it: its size and checksum against what
``meta.json`` recorded (when it did), the Parquet magic at both ends and a footer that decodes,
the column types against the schema, the columns the table cannot do without, and row counts
that agree with the footer. Anything else is a :class:`PartError` saying what is wrong and, when
the file was cut short, how a file gets that way.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from msprof_py.profile.schema import TABLES

MAGIC = b"PAR1"
CUT_SHORT = "was the run killed or the disk full?"
_PART = re.compile(r"^(?P<table>[a-z_]+)-(?P<index>\d{5})\.parquet$")


class PartError(ValueError):
    """A part file that cannot be used; ``cut``: it looks cut short (killed run, full disk)."""

    def __init__(self, path: Path, message: str, cut: bool = False) -> None:
        super().__init__(f"{path} {message}")
        self.path = path
        self.cut = cut


@dataclass
class Part:
    """One opened, checked part: its file, Parquet reader and row count."""

    path: Path
    file: pq.ParquetFile
    rows: int


def part_files(folder: Path, table: str) -> list[Path]:
    """The part files of ``table`` in ``folder``, in order (finished ones: no ``.tmp``)."""
    found = []
    for p in folder.glob(f"{table}-*.parquet"):
        match = _PART.match(p.name)
        if match and match.group("table") == table:
            found.append(p)
    return sorted(found)


def unfinished_files(folder: Path) -> list[Path]:
    """Temporary files a writer left behind (a chunk it was writing when the run died)."""
    return sorted(folder.glob("*.tmp"))


def index_of(path: Path) -> int:
    """The number of a part file (``tasks-00003.parquet`` -> 3)."""
    match = _PART.match(path.name)
    assert match is not None
    return int(match.group("index"))


def file_crc32(path: Path) -> int:
    """CRC-32 of a file, read in blocks (never whole in memory)."""
    crc = 0
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            crc = zlib.crc32(block, crc)
    return crc


def _check_ends(path: Path, size: int) -> None:
    if size == 0:
        raise PartError(path, f"is empty (0 bytes): {CUT_SHORT}", cut=True)
    with open(path, "rb") as f:
        head = f.read(4)
        f.seek(max(0, size - 4))
        tail = f.read(4)
    if head != MAGIC:
        raise PartError(path, "is not a Parquet file (no PAR1 magic at its start)")
    if size < 12 or tail != MAGIC:
        raise PartError(
            path, f"ends without the Parquet footer ({size} bytes, cut short): {CUT_SHORT}", True
        )


def _compatible(found: pa.DataType, wanted: pa.DataType) -> bool:
    if found == wanted:
        return True
    if pa.types.is_string(wanted):
        return pa.types.is_dictionary(found) and pa.types.is_string(found.value_type)
    return False


def open_part(
    path: Path,
    table: str,
    recorded: dict[str, Any] | None = None,
    read_dictionary: list[str] | None = None,
) -> Part:
    """``path`` opened and checked (see module docs); ``recorded``: what ``meta.json`` says of
    the part (``bytes``, ``rows``, ``crc32``), when it says anything."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise PartError(path, f"cannot be read ({exc.strerror or exc})") from None
    if recorded is not None:
        want = int(recorded["bytes"])
        if size < want:
            raise PartError(
                path, f"is {size} bytes, {want} when recorded (cut short): {CUT_SHORT}", True
            )
        if size != want:
            raise PartError(path, f"is {size} bytes, {want} when recorded (replaced or edited)")
    _check_ends(path, size)
    if recorded is not None and file_crc32(path) != int(recorded["crc32"]):
        raise PartError(
            path,
            "has changed since it was recorded (checksum mismatch): damaged on disk or edited",
        )
    try:
        file = pq.ParquetFile(path)
        schema = file.schema_arrow
        if read_dictionary:  # only the columns the part has (older parts lack newer ones)
            wanted = [c for c in read_dictionary if schema.get_field_index(c) >= 0]
            file = pq.ParquetFile(path, read_dictionary=wanted)
            schema = file.schema_arrow
        rows = file.metadata.num_rows
        groups = sum(file.metadata.row_group(i).num_rows for i in range(file.num_row_groups))
    except Exception as exc:  # pyarrow raises several kinds for a damaged footer
        raise PartError(path, f"is not a readable Parquet file ({_reason(exc)})") from None
    if rows < 0 or groups != rows:
        raise PartError(path, f"has inconsistent row counts ({rows} in the footer, {groups})")
    if recorded is not None and rows != int(recorded["rows"]):
        raise PartError(path, f"holds {rows} rows, {recorded['rows']} when recorded")
    spec = TABLES[table]
    for column in spec.columns:
        index = schema.get_field_index(column.name)
        if index < 0:
            if column.name in spec.required:
                raise PartError(
                    path, f"lacks the column {column.name!r} (the {table} table needs it)"
                )
            continue
        found = schema.field(index).type
        if not _compatible(found, column.type):
            raise PartError(
                path, f"column {column.name!r} is {found}, the {table} table has {column.type}"
            )
    return Part(path, file, rows)


def read_column(part: Part, name: str) -> list[pa.Array]:
    """The chunks of column ``name`` of ``part``; a damaged page becomes a :class:`PartError`."""
    try:
        return part.file.read(columns=[name], use_threads=False).column(0).chunks
    except Exception as exc:  # decompression, thrift and page errors alike
        raise PartError(part.path, f"column {name!r} cannot be read ({_reason(exc)})") from None


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 160 else text[:157] + "..."
