"""The mutation engine of the damaged-input fuzzer: what a mutation is, how it is applied,
and the invariant every command must keep ("a result or one clean error, never a traceback,
never a silently wrong result")."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import strategies as st

RAW = "msprof_raw"
KINDS = ("flip", "truncate", "delete", "empty", "random", "meta_key", "meta_whole", "schema")
TABLE_NAMES = ("tasks", "host_events", "memory", "steps")
META_KEYS = (
    "rank", "status", "format_version", "world_size", "device", "warmup", "rows", "parts",
    "host_time", "deterministic", "checksum", "steps_seen", "key_figures", "env",
)  # fmt: skip

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**64), 2**64)
    | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


@dataclass(frozen=True)
class Mutation:
    """One way of damaging a profile. ``target``: a table (its part 0) or ``meta``;
    ``where``/``value`` are read by the kind (a position fraction, a byte, a key ...)."""

    kind: str
    target: str
    where: float
    value: Any

    def describe(self) -> str:
        return f"{self.kind} {self.target} at {self.where:.3f} ({self.value!r})"[:160]


@st.composite
def mutations(draw: st.DrawFn) -> Mutation:
    kind = draw(st.sampled_from(KINDS))
    where = draw(st.floats(0, 1, exclude_max=True))
    if kind.startswith("meta"):
        target = "meta"
    elif kind == "schema":
        target = draw(st.sampled_from(TABLE_NAMES))
    else:
        target = draw(st.sampled_from((*TABLE_NAMES, "meta")))
    value: Any = None
    if kind == "flip":
        value = draw(st.integers(1, 255))
    elif kind == "random":
        value = draw(st.binary(min_size=0, max_size=256))
    elif kind == "meta_key":
        key = draw(st.sampled_from(META_KEYS))
        value = (key, draw(st.sampled_from(("set", "delete"))), draw(json_values))
    elif kind == "meta_whole":
        value = draw(json_values)
    elif kind == "schema":
        value = draw(st.sampled_from(("drop", "retype", "rename", "nulls", "extra_rows")))
    return Mutation(kind, target, where, value)


def _file(raw: Path, target: str) -> Path:
    return raw / ("meta.json" if target == "meta" else f"{target}-00000.parquet")


def apply(run: Path, m: Mutation) -> None:
    """Damage the profile in ``run`` (a ``*_ascend_pt`` folder) as ``m`` says."""
    raw = run / RAW
    path = _file(raw, m.target)
    data = path.read_bytes()
    at = int(m.where * len(data)) if data else 0
    if m.kind == "flip":
        if data:
            data = data[:at] + bytes([data[at] ^ m.value]) + data[at + 1 :]
        path.write_bytes(data)
    elif m.kind == "truncate":
        path.write_bytes(data[:at])
    elif m.kind == "delete":
        path.unlink()
    elif m.kind == "empty":
        path.write_bytes(b"")
    elif m.kind == "random":
        path.write_bytes(m.value)
    elif m.kind == "meta_key":
        info = json.loads(data)
        key, how, value = m.value
        if how == "delete":
            info.pop(key, None)
        else:
            info[key] = value
        path.write_text(json.dumps(info), encoding="utf-8")
    elif m.kind == "meta_whole":
        path.write_text(json.dumps(m.value), encoding="utf-8")
    elif m.kind == "schema":
        _schema(path, m)


def _schema(path: Path, m: Mutation) -> None:
    table = pq.read_table(path)
    i = int(m.where * table.num_columns)
    name = table.column_names[i]
    if m.value == "drop":
        table = table.remove_column(i)
    elif m.value == "rename":
        table = table.rename_columns(
            [*table.column_names[:i], name + "_x", *table.column_names[i + 1 :]]
        )
    elif m.value == "retype":
        table = table.set_column(i, name, pa.array([str(v) for v in table.column(i).to_pylist()]))
    elif m.value == "nulls":
        column = table.column(i)
        table = table.set_column(i, pa.field(name, column.type), pa.nulls(len(column), column.type))
    elif m.value == "extra_rows":
        table = pa.concat_tables([table, table.slice(0, 1)])
    pq.write_table(table, path)


class Tally:
    """Counts of outcomes over a fuzz run (for benchmarks/RESULTS.md)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def add(self, outcome: str) -> None:
        self.counts["cases"] += 1
        self.counts[outcome] += 1

    def as_dict(self) -> dict[str, int]:
        return dict(sorted(self.counts.items()))


def fresh_copy(source: Path, dest_root: Path) -> Path:
    """``source`` copied under ``dest_root`` (emptied first)."""
    if dest_root.exists():
        shutil.rmtree(dest_root)
    dest = dest_root / source.name
    shutil.copytree(source, dest)
    return dest
