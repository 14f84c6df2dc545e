"""``meta.json``: reading it defensively, its schema, and the checksum that seals it.

Every key a reader relies on has a type and a range here; a ``meta.json`` that breaks one is
refused with one message naming the file, the key and what is wrong. Keys not listed are
kept as they are (later versions may add some). The recorder seals the file with a checksum
of its content (``checksum``); a file edited afterwards still loads, with a warning saying so.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from msprof_py.profile.schema import FORMAT_VERSION, TABLES

#: a meta.json is a few KiB (plus ~100 bytes per part it lists); anything larger is not one
META_LIMIT_BYTES = 16 * 1024 * 1024
#: deeper JSON than this is no meta.json (and would exhaust the parser's recursion)
META_DEPTH_LIMIT = 32
#: how a run can end; ``running``: the recorder never finished (the process was killed)
STATUSES = (
    "running",
    "completed",
    "killed",
    "terminated",
    "interrupted",
    "exception",
    "oom",
)
#: statuses of a profile the recorder never finished: its last rows may be missing
UNFINISHED = ("running", "killed")
CHECKSUM_KEY = "checksum"
_INT_LIMIT = 2**63


class MetaError(ValueError):
    """What is wrong with a ``meta.json`` (the loader adds the file's path)."""


def _int(minimum: int = 0, maximum: int = _INT_LIMIT - 1, none: bool = False) -> Callable:
    def check(value: Any) -> str | None:
        if value is None and none:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            return f"must be an integer{' or null' if none else ''}, got {_shown(value)}"
        if not minimum <= value <= maximum:
            return f"must be between {minimum} and {maximum}, got {value}"
        return None

    return check


def _number(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"must be a number, got {_shown(value)}"
    if not math.isfinite(value) or value < 0:
        return f"must be a finite number >= 0, got {value!r}"
    return None


def _str(value: Any) -> str | None:
    return None if isinstance(value, str) else f"must be a string, got {_shown(value)}"


def _bool(value: Any) -> str | None:
    return None if isinstance(value, bool) else f"must be true or false, got {_shown(value)}"


def _choice(*choices: str) -> Callable:
    def check(value: Any) -> str | None:
        if value not in choices:
            return f"must be one of {', '.join(choices)}; got {_shown(value)}"
        return None

    return check


def _str_map(value: Any) -> str | None:
    if not isinstance(value, dict):
        return f"must be an object, got {_shown(value)}"
    for k, v in value.items():
        if not isinstance(v, (str, int, float, bool)) or v is None:
            return f"entry {k!r} must be a string or number, got {_shown(v)}"
    return None


def _rows(value: Any) -> str | None:
    if not isinstance(value, dict):
        return f"must be an object of table = row count, got {_shown(value)}"
    for table, count in value.items():
        if table not in TABLES:
            return f"names an unknown table {table!r} (tables: {', '.join(TABLES)})"
        problem = _int()(count)
        if problem:
            return f"{table} {problem}"
    return None


#: the longest thread name kept (an OS name is at most 15 characters, a Python one any length)
THREAD_NAME_LIMIT = 200


def _threads(value: Any) -> str | None:
    if not isinstance(value, dict):
        return f"must be an object of thread id = name, got {_shown(value)}"
    for thread, name in value.items():
        if not thread.isdecimal():
            return f"names a thread {thread!r} that is not a thread id (a whole number)"
        if not isinstance(name, str) or len(name) > THREAD_NAME_LIMIT:
            return f"entry {thread!r} must be a name of at most {THREAD_NAME_LIMIT} characters"
    return None


_PART_KEYS = {"file": _str, "rows": _int(), "bytes": _int(), "crc32": _int(0, 2**32 - 1)}


def _parts(value: Any) -> str | None:
    if not isinstance(value, dict):
        return f"must be an object of table = list of parts, got {_shown(value)}"
    for table, parts in value.items():
        if table not in TABLES:
            return f"names an unknown table {table!r} (tables: {', '.join(TABLES)})"
        if not isinstance(parts, list):
            return f"{table} must be a list of parts, got {_shown(parts)}"
        for i, part in enumerate(parts):
            if not isinstance(part, dict):
                return f"{table}[{i}] must be an object, got {_shown(part)}"
            for key, check in _PART_KEYS.items():
                if key not in part:
                    return f"{table}[{i}] lacks {key!r}"
                problem = check(part[key])
                if problem:
                    return f"{table}[{i}].{key} {problem}"
            if part["file"] != f"{table}-{i:05d}.parquet":
                return f"{table}[{i}].file must be {table}-{i:05d}.parquet, got {part['file']!r}"
    return None


#: key -> check (a message when the value is wrong); ``rank`` is the one key required
KEYS: dict[str, Callable[[Any], str | None]] = {
    "format_version": _int(1, FORMAT_VERSION),
    "rank": _int(0, 2**31 - 1),
    "world_size": _int(1, 2**31 - 1),
    "status": _choice(*STATUSES),
    "command": _str,
    "cwd": _str,
    "device": _str,
    "device_origin": _str,
    "soc_version": _str,
    "key_figures": _str_map,
    "ai_core_num": _int(),
    "aiv_num": _int(),
    "aic_frequency_mhz": _number,
    "numerics": _choice("cpu", "none", "fast"),
    "host_time": _choice("modeled", "measured"),
    "deterministic": _bool,
    "warmup": _int(),
    "iteration": _int(1, none=True),
    "record_tasks": _bool,
    "record_memory": _bool,
    "record_api": _bool,
    "hostname": _str,
    "pid": _int(),
    "start_time": _str,
    "end_time": _str,
    "versions": _str_map,
    "env": _str_map,
    "run_dir": _str,
    "exit_code": _int(-(2**31), 2**31 - 1),
    "host_end_ns": _int(),
    "device_end_ns": _int(),
    "steps_seen": _int(),
    "profiler_hooks_ns": _int(),
    "recording_error": _str,
    "rows": _rows,
    "parts": _parts,
    "threads": _threads,
    CHECKSUM_KEY: _str,
}
REQUIRED = ("rank",)


def _shown(value: Any) -> str:
    kind = {
        str: "a string",
        bool: "a boolean",
        list: "a list",
        dict: "an object",
        int: "an integer",
        float: "a number",
        type(None): "null",
    }.get(type(value), type(value).__name__)
    text = repr(value)
    return f"{text if len(text) <= 40 else text[:37] + '...'} ({kind})"


def _depth(value: Any, limit: int) -> bool:
    """Whether ``value`` nests deeper than ``limit`` (iteratively: no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if level > limit:
            return True
        if isinstance(item, dict):
            stack += [(v, level + 1) for v in item.values()]
        elif isinstance(item, list):
            stack += [(v, level + 1) for v in item]
    return False


def parse_meta(data: bytes) -> dict[str, Any]:
    """The validated metadata in ``data`` (a ``meta.json``'s bytes); raises :class:`MetaError`."""
    if len(data) > META_LIMIT_BYTES:
        raise MetaError(f"is {len(data)} bytes, more than a meta.json can be ({META_LIMIT_BYTES})")
    if not data.strip():
        raise MetaError("is empty (was the run killed or the disk full while it was written?)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MetaError(f"is not valid UTF-8 (byte {exc.start})") from None
    try:
        info = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        cut = exc.pos >= len(text.rstrip()) - 1
        hint = " (cut short: was the run killed or the disk full?)" if cut else ""
        raise MetaError(f"is not valid JSON: {exc.msg} at line {exc.lineno}{hint}") from None
    except RecursionError:
        raise MetaError(f"nests deeper than {META_DEPTH_LIMIT} levels (not a meta.json)") from None
    except ValueError as exc:
        raise MetaError(f"is not valid JSON: {exc}") from None
    return validate_meta(info)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def validate_meta(info: Any) -> dict[str, Any]:
    """``info`` checked against :data:`KEYS` (returned as it is); raises :class:`MetaError`."""
    if not isinstance(info, dict):
        raise MetaError(f"must be a JSON object, got {_shown(info)}")
    if _depth(info, META_DEPTH_LIMIT):
        raise MetaError(f"nests deeper than {META_DEPTH_LIMIT} levels (not a meta.json)")
    for key in REQUIRED:
        if key not in info:
            raise MetaError(f"lacks the required key {key!r}")
    if info.get("format_version", 1) not in range(1, FORMAT_VERSION + 1):
        version = info.get("format_version")
        if isinstance(version, int) and not isinstance(version, bool) and version > 1:
            raise MetaError(
                f"has format_version {version}: written by a newer msprof-py (this one reads "
                f"up to {FORMAT_VERSION}); upgrade msprof-py"
            )
    for key, check in KEYS.items():
        if key in info:
            problem = check(info[key])
            if problem:
                raise MetaError(f"key {key!r} {problem}")
    return info


def checksum(info: dict[str, Any]) -> str:
    """The checksum of ``info`` (every key but ``checksum`` itself, canonical JSON)."""
    body = {k: v for k, v in info.items() if k != CHECKSUM_KEY}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def sealed(info: dict[str, Any]) -> dict[str, Any]:
    """``info`` with its :func:`checksum` (what the recorder writes)."""
    body = {k: v for k, v in info.items() if k != CHECKSUM_KEY}
    return {**body, CHECKSUM_KEY: checksum(body)}


def seal_ok(info: dict[str, Any]) -> bool | None:
    """Whether ``info``'s checksum matches its content (None: it carries none)."""
    stored = info.get(CHECKSUM_KEY)
    if stored is None:
        return None
    # what was written went through JSON with default=str: compare as such
    return stored == checksum(json.loads(json.dumps(info, default=str)))


def fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (best effort where directories cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_meta_file(path: Path, info: dict[str, Any]) -> None:
    """Write ``info`` sealed to ``path`` so a reader never sees half a file (temporary name,
    fsync, rename)."""
    write_json_atomic(path, sealed(info))


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so a reader never sees a half-written file (write, fsync, rename)."""
    tmp = path.with_name(path.name + ".tmp")
    text = json.dumps(data, indent=2, sort_keys=True, default=str)
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)
