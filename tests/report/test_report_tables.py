"""The report's tables read as a tool's: times in us or ms with thousands separators, shares as
percentages, bytes in KiB/MiB/GiB, no scientific notation, human headers, a raw sort key per
cell; a finding's evidence as small tables, not JSON."""

from __future__ import annotations

import pandas as pd

from msprof_py.report.tables import evidence, number, size, table


def _texts(t: dict) -> list[list[str]]:
    return [[text for text, _ in row] for row in t["rows"]]


def test_a_table_is_formatted_for_people() -> None:
    df = pd.DataFrame(
        {
            "rank": [0, 0],
            "op_type": ["MatMul", "Add"],
            "count": [12_345, 3],
            "total_ns": [2_097_152.0, 1_500.0],  # largest under 10 ms: in us
            "share_of_step": [0.4567, 0.00012],
            "workspace_bytes": [26_214_400, 1_536],
        }
    )
    t = table(df)
    # one rank: no rank column; headers in words, the time unit named
    assert [c["name"] for c in t["columns"]] == [
        "Op type",
        "Count",
        "Total (us)",
        "Share of step",
        "Workspace bytes",
    ]
    assert _texts(t) == [
        ["MatMul", "12,345", "2,097.2", "45.7%", "25.00 MiB"],
        ["Add", "3", "1.5", "0.0%", "1.50 KiB"],
    ]
    # the sort key is the raw value (the page sorts numbers as numbers)
    assert [key for _, key in t["rows"][0]][1:] == [12_345, 2_097_152.0, 0.4567, 26_214_400]
    # a column whose largest time is 10 ms or more reads in ms
    ms = table(pd.DataFrame({"total_ns": [12_345_678.0, 5_000.0]}))
    assert ms["columns"][0]["name"] == "Total (ms)"
    assert _texts(ms) == [["12.35"], ["0.01"]]


def test_numbers_never_use_an_exponent() -> None:
    assert number(2.09716e6) == "2,097,160"
    assert number(1.234567e-7) == "0.000000123"
    assert number(262_144.5) == "262,144"
    assert size(2.09716e6) == "2.00 MiB" and size(3 * 2**30) == "3.00 GiB" and size(512) == "512 B"


def test_evidence_is_small_tables() -> None:
    ev = {
        "idle_ns": 1_234_567.0,
        "overlap_ratio": 0.25,
        "device": {"capacity_bytes": 2**30},
        "ops": [{"name": "aten::add", "total_ns": 3_000.0}, {"name": "aten::mm", "total_ns": 10.0}],
    }
    fields, ops = evidence(ev)
    assert [c["name"] for c in fields["columns"]] == ["Field", "Value"]
    assert _texts(fields) == [
        ["Idle", "1,234.6 us"],
        ["Overlap ratio", "25.0%"],
        ["Device.capacity bytes", "1.00 GiB"],
    ]
    assert ops["title"] == "Ops"
    assert [c["name"] for c in ops["columns"]] == ["Name", "Total (us)"]
    assert _texts(ops) == [["aten::add", "3.0"], ["aten::mm", "0.0"]]
