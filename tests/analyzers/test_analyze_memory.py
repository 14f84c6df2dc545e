"""``analyze(path)`` loads lean (categorical strings, only the columns read, rows of the
analysed steps shared with the whole recording) and answers exactly as on a plain load."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from analyze_helpers import Builder, chain, cluster, save
from test_analyze_rules import (
    aicpu,
    communication,
    conv_chain,
    copies,
    dataloader,
    dispatch,
    optimizer,
    ranks,
    syncs,
    transdata,
)

from msprof_py.analyzers import analyze, context
from msprof_py.profile import Profile, load
from msprof_py.profile.schema import TABLES


def stepped() -> Profile:
    """Three steps of a conv chain, a copy and a sync: the first is left out as warm-up."""
    b = Builder()
    for step in range(3):
        t0 = step * 100_000
        b.step(step, t0, t0 + 100_000)
        b.event("annotation", "Optimizer.step#SGD.step", t0 + 80_000, t0 + 90_000, step=step)
        ops = [
            ("aten::convolution", "8,3,32,32;16,3,3,3", "8,16,30,30", {"op_type": "Conv2D"}),
            ("aten::native_batch_norm", "8,16,30,30", "8,16,30,30", {"op_type": "BNTraining"}),
            ("aten::relu", "8,16,30,30", "8,16,30,30", {"op_type": "Relu"}),
        ]
        t = chain(b, t0 + 1_000, ops, step=step, module=f"Net/Block{step}")
        b.op(
            "aten::copy_",
            t,
            t + 2_000,
            [
                {
                    "start": t + 500,
                    "end": t + 3_000,
                    "kind": "memcpy",
                    "task_type": "DMA",
                    "op_type": "MEMCPY_H2D",
                    "copy_kind": "HOST_TO_DEVICE",
                    "bytes": 4096,
                }
            ],
            step=step,
        )
        b.event("sync", "aclrtSynchronizeDevice", t + 2_000, t + 4_000, step=step)
        b.mem(t0 + 10, 1000 * (step + 1), 4000, step=step)
    return b.build()


PROFILES = {
    "stepped": stepped,
    "conv_chain": conv_chain,
    "transdata": transdata,
    "aicpu": aicpu,
    "dispatch": dispatch,
    "copies": copies,
    "syncs": syncs,
    "optimizer": optimizer,
    "dataloader": dataloader,
    "communication": communication,
    "ranks": ranks,
}


def same(a: object, b: object, where: str) -> None:
    if isinstance(a, pd.DataFrame):
        pd.testing.assert_frame_equal(a, b, check_exact=True, obj=where)
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and np.isnan(a):
        assert isinstance(b, float) and np.isnan(b), where
    else:
        assert a == b, where


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_lean_path_answers_as_a_plain_load(name: str, tmp_path: Path) -> None:
    folder = save(PROFILES[name](), tmp_path / name)
    lean, plain = analyze(folder), analyze(load(folder))
    for f in dataclasses.fields(lean):
        same(getattr(lean, f.name), getattr(plain, f.name), f.name)
    assert lean.to_json() == plain.to_json()


def test_categorical_load_matches_compacted_plain_load(tmp_path: Path) -> None:
    a = Builder(rank=0).step(0, 0, 10)
    a.op("aten::mul", 0, 5, [{"start": 1, "end": 3, "op_type": "Mul"}])
    b = Builder(rank=1).step(0, 0, 10)
    b.op("aten::add", 0, 5, [{"start": 1, "end": 3, "op_type": "Add"}])
    folder = save(cluster(a, b), tmp_path / "two")
    plain, cat = load(folder), load(folder, categorical=True)
    for name in TABLES:
        # ranks with different strings still concatenate to categoricals, categories sorted
        pd.testing.assert_frame_equal(cat.tables[name], context.compact(plain.tables[name]))
    op_type = cat.tasks["op_type"]
    assert isinstance(op_type.dtype, pd.CategoricalDtype)
    assert list(op_type.cat.categories) == ["Add", "Mul"]
    one = context.compact(cat.for_rank(1).tasks)  # a rank keeps only its own categories
    assert list(one["op_type"].cat.categories) == ["Add"]


def test_columns_and_older_parts(tmp_path: Path) -> None:
    b = Builder().step(0, 0, 10)
    b.op("aten::mul", 0, 5, [{"start": 1, "end": 3}])
    folder = save(b.build(), tmp_path / "p")
    raw = next(folder.glob("*/msprof_raw"))
    # a part written before a column existed reads it as the neutral value
    import pyarrow.parquet as pq

    part = raw / "tasks-00000.parquet"
    pq.write_table(pq.read_table(part).drop_columns(["world_size"]), part)
    got = load(folder, columns={"tasks": ["task_id", "world_size", "kind"]})
    assert list(got.tasks.columns) == ["rank", "task_id", "kind", "world_size"]
    assert got.tasks["world_size"].tolist() == [0]
    assert got.tasks["world_size"].dtype == np.int32
    assert list(got.host_events.columns) == ["rank", *TABLES["host_events"].names]


def test_unread_columns_are_not_read_by_any_analysis() -> None:
    source = "\n".join(
        p.read_text(encoding="utf-8")
        for p in Path(context.__file__).parent.glob("*.py")
        if p.name != "context.py"
    )
    for table, columns in context.UNREAD_COLUMNS.items():
        for column in columns:
            assert column in TABLES[table].names
            assert not re.search(rf"[\"'.]{column}\b", source), (table, column)


def test_rows_of_a_run_share_the_recording() -> None:
    frame = pd.DataFrame({"step": [0, 1, 1, 2], "x": [1, 2, 3, 4]})
    run, start = context.rows(frame, frame["step"] == 1)
    assert start == 1 and run["x"].tolist() == [2, 3] and list(run.index) == [0, 1]
    assert np.shares_memory(run["x"].to_numpy(), frame["x"].to_numpy())
    scattered, start = context.rows(frame, frame["step"] != 1)
    assert start is None and scattered["x"].tolist() == [1, 4]
