"""Reading the files of Ascend profiles exactly and safely: CSVs, JSON, timestamps.

Ascend files carry absolute wall-clock microseconds with 3 decimals (``1736413971558972.912``,
CANN sometimes with a trailing TAB); a float cannot hold 19 significant digits, so times are
parsed as decimal text straight into integer nanoseconds (:func:`ns_column`). JSON is read
with its floats kept as text for the same reason (:func:`read_json`).

Whatever is wrong with a file is one :class:`~msprof_py.profile.ProfileError` naming the file,
and the row and column where a value is bad (CSV rows are counted as lines, the header being
line 1). A CSV whose last line was cut short (fewer fields, no line end: the writer died) loads
without that row; :class:`CsvTable` says so in ``truncated``.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from msprof_py.profile import ProfileError

#: values Ascend files write for "no value"
MISSING = ("", "N/A", "NA", "nan", "NaN", "None", "null", "-")
_DECIMAL = re.compile(r"^[+-]?\d+(\.\d*)?$|^[+-]?\.\d+$")
#: what a CSV may hold at most (a runaway file is an error, not a memory blow-up)
CSV_LIMIT_BYTES = 4 * 1024**3


@dataclass
class CsvTable:
    """One CSV as read: its cells as text (``frame``), its path, and whether the last line was
    cut short (then dropped)."""

    path: Path
    frame: pd.DataFrame
    truncated: bool = False
    notes: list[str] = field(default_factory=list)

    def has(self, column: str) -> bool:
        """Whether the header names ``column``."""
        return column in self.frame.columns

    def text(self, column: str, default: str = "") -> pd.Series:
        """Column ``column`` stripped of spaces, TABs and torch_npu's literal quotes, with the
        missing markers (``N/A`` ...) as ``default``."""
        if column not in self.frame.columns:
            return pd.Series(default, index=self.frame.index, dtype=object)
        values = self.frame[column].astype(str).str.strip().str.strip('"').str.strip()
        return values.where(~values.isin(MISSING), default).astype(object)

    def ns(self, column: str, default: int = 0) -> np.ndarray:
        """Column ``column`` (µs) as integer ns; missing cells ``default``."""
        if column not in self.frame.columns:
            return np.full(len(self.frame), default, dtype=np.int64)
        return ns_column(self.frame[column], self.path, column, default)

    def number(self, column: str, default: float = 0.0) -> np.ndarray:
        """Column ``column`` as float; missing cells ``default``."""
        if column not in self.frame.columns:
            return np.full(len(self.frame), default, dtype=np.float64)
        return float_column(self.frame[column], self.path, column, default)

    def integer(self, column: str, default: int = 0) -> np.ndarray:
        """Column ``column`` as int64 (``"16"``, ``"16.0"``); missing cells ``default``."""
        values = self.number(column, float(default))
        bad = values != np.round(values)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            cell = self.frame[column].iat[row]
            raise ProfileError(
                f"{self.path} row {row + 2} column {column!r}: {str(cell).strip()!r} is not "
                "a whole number"
            )
        return values.astype(np.int64)


def _bad_number(path: Path, column: str, values: pd.Series, bad: np.ndarray) -> ProfileError:
    row = int(np.flatnonzero(bad)[0])
    cell = str(values.iat[row]).strip()
    return ProfileError(f"{path} row {row + 2} column {column!r}: {cell[:40]!r} is not a number")


def ns_column(values: pd.Series, path: Path, column: str, default: int = 0) -> np.ndarray:
    """µs text (``"1736413971558972.912\\t"``, ``"185.504"``) as exact integer ns."""
    text = values.astype(str).str.strip().str.strip('"').str.strip()
    missing = text.isin(MISSING).to_numpy()
    plain = text.str.match(_DECIMAL).to_numpy() & ~missing
    out = np.full(len(text), default, dtype=np.int64)
    if plain.any():
        parts = text[plain].str.split(".", n=1, expand=True)
        whole = parts[0].replace({"": "0", "+": "0", "-": "-0"})
        frac = parts[1] if parts.shape[1] > 1 else pd.Series("", index=parts.index)
        frac = frac.fillna("").str.ljust(3, "0")
        rest = frac.str[3:]
        negative = whole.str.startswith("-").to_numpy()
        try:
            units = whole.str.lstrip("+-").astype(np.int64).to_numpy()
        except (ValueError, OverflowError):
            raise _bad_number(path, column, values, plain) from None
        milli = frac.str[:3].astype(np.int64).to_numpy()
        # round half up on the digits below the ns
        up = rest.str[:1].isin(list("56789")).to_numpy()
        ns = units * 1000 + milli + up
        out[plain] = np.where(negative, -ns, ns)
    other = ~plain & ~missing
    if other.any():  # 1e-05, inf ...
        floats = pd.to_numeric(text[other], errors="coerce").to_numpy(dtype=np.float64)
        bad = ~np.isfinite(floats)
        if bad.any():
            mask = np.zeros(len(text), dtype=bool)
            mask[np.flatnonzero(other)[bad]] = True
            raise _bad_number(path, column, values, mask)
        out[other] = np.round(floats * 1000.0).astype(np.int64)
    return out


def float_column(values: pd.Series, path: Path, column: str, default: float = 0.0) -> np.ndarray:
    """A numeric column as float (missing cells ``default``; anything else not a number is an
    error naming its row)."""
    text = values.astype(str).str.strip().str.strip('"').str.strip()
    missing = text.isin(MISSING).to_numpy()
    floats = pd.to_numeric(text.where(~missing, "0"), errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(floats) & ~missing
    if bad.any():
        raise _bad_number(path, column, values, bad)
    return np.where(missing, default, floats)


def read_csv(path: Path, required: Sequence[str], what: str) -> CsvTable:
    """The CSV at ``path`` as text cells. ``required``: columns its header must name (else a
    one-line error saying which are missing; ``what`` names the file kind in it)."""
    try:
        size = path.stat().st_size
        if size > CSV_LIMIT_BYTES:
            raise ProfileError(f"{path} is {size} bytes, more than msprof reads")
        raw = path.read_bytes()
    except OSError as exc:
        raise ProfileError(f"{path} cannot be read ({exc.strerror or exc})") from None
    try:
        content = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ProfileError(f"{path} is not UTF-8 text (byte {exc.start})") from None
    if "\0" in content:
        raise ProfileError(f"{path} holds NUL bytes: not a {what} CSV")
    rows = list(csv.reader(io.StringIO(content, newline="")))
    if not rows or not any(c.strip() for c in rows[0]):
        raise ProfileError(f"{path} is empty: no {what} header")
    header = [c.strip() for c in rows[0]]
    missing = [c for c in required if c not in header]
    if missing:
        raise ProfileError(
            f"{path}: the header lacks {', '.join(repr(c) for c in missing)} (not a {what} "
            f"CSV, or its header is damaged; it starts {','.join(header[:4])[:60]!r})"
        )
    body = rows[1:]
    truncated = False
    notes: list[str] = []
    width = len(header)
    if body and len(body[-1]) < width and not content.endswith(("\n", "\r")):
        truncated = True
        notes.append(
            f"{path} line {len(rows)} is cut short ({len(body[-1])} of {width} fields): "
            "dropped (partial file)"
        )
        body = body[:-1]
    for i, row in enumerate(body):
        if len(row) != width and any(cell.strip() for cell in row):
            raise ProfileError(
                f"{path} row {i + 2}: {len(row)} fields where the header has {width}"
            )
    body = [r for r in body if len(r) == width]
    frame = pd.DataFrame(body, columns=header, dtype=object)
    if frame.columns.duplicated().any():  # CANN repeats Reduce Start/Duration pairs
        frame = frame.loc[:, ~frame.columns.duplicated()]
    return CsvTable(path, frame, truncated, notes)


def read_json(path: Path, what: str) -> Any:
    """The JSON at ``path`` with floats as text (exact timestamps); a one-line error when it
    is not JSON (cut short, garbled)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ProfileError(f"{path} cannot be read ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8-sig")
        return json.loads(text, parse_float=str)
    except UnicodeDecodeError as exc:
        raise ProfileError(f"{path} is not UTF-8 text (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        # the document ends where the parser stopped, or inside a string never closed
        cut = exc.pos >= len(text.rstrip()) - 1 or (
            exc.msg.startswith("Unterminated string") and '"' not in text[exc.pos + 1 :]
        )
        why = "cut short" if cut else f"{exc.msg} at line {exc.lineno} column {exc.colno}"
        raise ProfileError(f"{path} is not valid JSON ({why}): a damaged {what}") from None
    except RecursionError:
        raise ProfileError(f"{path} nests too deeply: not a {what}") from None


def ns_value(value: Any, where: str) -> int:
    """One JSON time or duration (µs, text or number) as integer ns."""
    if isinstance(value, bool) or value is None:
        raise ProfileError(f"{where}: {value!r} is not a time")
    if isinstance(value, int):
        return value * 1000
    text = str(value).strip()
    if _DECIMAL.match(text):
        whole, _, frac = text.partition(".")
        sign = -1 if whole.startswith("-") else 1
        frac = frac.ljust(3, "0")
        up = 1 if frac[3:4] in ("5", "6", "7", "8", "9") else 0
        return sign * (int(whole.lstrip("+-") or "0") * 1000 + int(frac[:3]) + up)
    try:
        number = float(text)
    except ValueError:
        raise ProfileError(f"{where}: {text[:40]!r} is not a number") from None
    if not np.isfinite(number):
        raise ProfileError(f"{where}: {text[:40]!r} is not a number")
    return round(number * 1000.0)
