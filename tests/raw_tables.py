"""The tables of a recorded profile's raw folder (``msprof_raw``), read as Arrow tables: what
tests compare between two recordings of the same program."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from msprof_py.profile.schema import TABLES


def read_raw_tables(raw: Path) -> dict[str, pa.Table]:
    """Every table with at least one part in ``raw``, its parts concatenated in order."""
    tables = {}
    for name in TABLES:
        parts = sorted(raw.glob(f"{name}-*.parquet"))
        if parts:
            tables[name] = pa.concat_tables([pq.read_table(p) for p in parts])
    return tables
