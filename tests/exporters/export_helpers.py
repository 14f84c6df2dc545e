"""Hand-made profiles for the exporter tests: every column of the schema, with defaults."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from msprof_py.profile import Profile
from msprof_py.profile.schema import TABLES, default_row

DEFAULTS: dict[str, dict[str, Any]] = {
    "tasks": default_row("tasks")
    | {
        "kind": "kernel",
        "task_type": "AI_CORE",
        "name": "aten::mm",
        "op_type": "MatMul",
        "block_dim": 24,
    },
    "host_events": default_row("host_events") | {"kind": "op", "thread": 1, "stream_id": -1},
    "memory": default_row("memory"),
    "steps": {"source": "optimizer", "optimizer_id": -1},
}
for _table, _required in (
    ("tasks", ("task_id", "start_ns", "end_ns")),
    ("host_events", ("event_id", "name", "start_ns", "end_ns")),
    ("memory", ("time_ns", "action", "address", "size", "allocated", "reserved")),
):
    for _name in _required:  # a row must give these itself
        DEFAULTS[_table].pop(_name)

META = {
    "format_version": 1,
    "status": "completed",
    "device": "ascend910b",
    "soc_version": "Ascend910B2",
    "ai_core_num": 24,
    "aiv_num": 48,
    "aic_frequency_mhz": 1800.0,
    "key_figures": {"cores": "24 AIC + 48 AIV, 6 AI CPU"},
    "rank": 0,
    "world_size": 1,
    "hostname": "host",
    "pid": 4242,
    "start_time": "2026-01-02T03:04:05.678",
    "end_time": "2026-01-02T03:04:06.789",
    "env": {"ASCEND_LAUNCH_BLOCKING": "0"},
    "run_dir": "host_4242_20260102030405678_ascend_pt",
}


def frame(table: str, rows: list[dict[str, Any]], rank: int = 0) -> pd.DataFrame:
    """A table of the schema from partial rows (missing columns take the defaults)."""
    names = TABLES[table].names
    full = []
    for i, row in enumerate(rows):
        values = {**DEFAULTS[table], **row}
        if table == "tasks":
            values.setdefault("task_id", i)
        if table == "host_events":
            values.setdefault("event_id", i)
        missing = [n for n in names if n not in values]
        if missing:
            raise KeyError(f"{table} row {i}: missing {missing}")
        full.append([values[n] for n in names])
    df = pd.DataFrame(full, columns=names)
    if not rows:
        df = TABLES[table].schema.empty_table().to_pandas()
    df.insert(0, "rank", rank)
    return df


def make_profile(
    tasks: list[dict[str, Any]] = (),
    host_events: list[dict[str, Any]] = (),
    memory: list[dict[str, Any]] = (),
    steps: list[dict[str, Any]] = (),
    **meta: Any,
) -> Profile:
    """A one-rank profile from partial rows."""
    info = {**META, **meta}
    rank = int(info["rank"])
    tables = {
        "tasks": frame("tasks", list(tasks), rank),
        "host_events": frame("host_events", list(host_events), rank),
        "memory": frame("memory", list(memory), rank),
        "steps": frame("steps", list(steps), rank),
    }
    return Profile(Path("."), {rank: info}, tables)


def big_profile(
    n_tasks: int, n_steps: int = 100, seed: int = 0, collective_share: float = 0.02
) -> Profile:
    """A synthetic profile with ``n_tasks`` kernels/copies/collectives, one host op and one
    launch per task and ``n_tasks / 2`` allocator events (to time the exporters at scale:
    1M tasks export in about 30 s, writing about 4 GB)."""
    rng = np.random.default_rng(seed)
    dur = rng.integers(1_000, 50_000, n_tasks)
    gap = rng.integers(0, 5_000, n_tasks)
    start = np.cumsum(gap + np.concatenate([[0], dur[:-1]]))
    end = start + dur
    share = collective_share
    kinds = rng.choice(["kernel", "memcpy", "collective"], n_tasks, p=[0.8 - share, 0.2, share])
    task_type = np.where(
        kinds == "kernel", rng.choice(["AI_CORE", "AI_VECTOR_CORE", "AI_CPU"], n_tasks), "DMA"
    )
    task_type = np.where(kinds == "collective", "HCCL", task_type)
    op_types = rng.choice(["MatMul", "Add", "Mul", "Conv2D", "ReduceSum", "Relu"], n_tasks)
    per_step = max(1, n_tasks // n_steps)
    step = np.minimum(np.arange(n_tasks) // per_step, n_steps - 1)
    host_start = start - 2_000
    tasks = pd.DataFrame(
        {
            "task_id": np.arange(n_tasks),
            "stream_id": np.where(kinds == "collective", 1, 0),
            "kind": kinds,
            "task_type": task_type,
            "name": np.where(
                kinds == "collective", "hcom_allreduce_", "aten::" + pd.Series(op_types).str.lower()
            ),
            "op_type": np.where(kinds == "collective", "allreduce", op_types),
            "block_dim": rng.integers(1, 48, n_tasks),
            "launch_ns": host_start + 1_000,
            "start_ns": start,
            "end_ns": end,
            "wait_ns": gap,
            "flops": rng.random(n_tasks) * 1e9,
            "bytes": rng.integers(0, 1 << 24, n_tasks),
            "input_shapes": "128,256;256,512",
            "input_dtypes": "float16;float16",
            "input_formats": "ND;ND",
            "output_shapes": "128,512",
            "output_dtypes": "float16",
            "output_formats": "ND",
            "copy_kind": np.where(kinds == "memcpy", "HOST_TO_DEVICE", ""),
            "pinned": False,
            "collective": np.where(kinds == "collective", "allreduce", ""),
            "algorithm": np.where(kinds == "collective", "mesh", ""),
            "world_size": np.where(kinds == "collective", 2, 0),
            "notify_wait_ns": 0,
            "op_state": np.where(kinds == "kernel", "dynamic", ""),
            "cube_ns": np.where(task_type == "AI_CORE", dur // 2, 0),
            "vector_ns": np.where(task_type == "AI_VECTOR_CORE", dur // 2, 0),
            "memory_ns": np.where(kinds == "kernel", dur // 3, 0),
            "host_op_id": np.arange(n_tasks) * 2,
            "step": step,
        }
    )
    ops = pd.DataFrame(
        {
            "event_id": np.arange(n_tasks) * 2,
            "kind": "op",
            "name": tasks["name"],
            "start_ns": host_start,
            "end_ns": host_start + 1_500,
            "thread": 7,
            "stream_id": -1,
            "task_id": -1,
            "parent_id": -1,
            "step": step,
            "input_shapes": "128,256;256,512",
            "input_dtypes": "float16;float16",
            "module": "Model/Linear",
            "sequence": -1,
            "module_path": "fc",
            "stack": "",
        }
    )
    launches = ops.assign(
        event_id=ops["event_id"] + 1,
        kind="launch",
        start_ns=host_start + 200,
        end_ns=host_start + 1_000,
        stream_id=tasks["stream_id"],
        task_id=tasks["task_id"],
        parent_id=ops["event_id"],
        input_shapes="",
        input_dtypes="",
        module="",
        module_path="",
    )
    host = pd.concat([ops, launches], ignore_index=True)
    bounds = np.searchsorted(step, np.arange(n_steps))
    step_start = host_start[bounds]
    step_end = np.append(step_start[1:], end[-1])
    steps = pd.DataFrame(
        {
            "step": np.arange(n_steps),
            "start_ns": step_start,
            "end_ns": step_end,
            "source": "optimizer",
            "optimizer_id": -1,
        }
    )
    n_mem = n_tasks // 2
    mem = pd.DataFrame(
        {
            "time_ns": np.sort(rng.integers(0, int(end[-1]), n_mem)),
            "action": np.tile(["malloc", "free"], n_mem // 2 + 1)[:n_mem],
            "address": np.repeat(np.arange(n_mem // 2 + 1) * 512, 2)[:n_mem],
            "size": 512,
            "allocated": rng.integers(0, 1 << 30, n_mem),
            "reserved": 1 << 31,
            "active": rng.integers(0, 1 << 30, n_mem),
            "stream_id": 0,
            "tag": "aten::empty",
            "step": 0,
        }
    )
    tables = {}
    for name, df in (("tasks", tasks), ("host_events", host), ("memory", mem), ("steps", steps)):
        df = df[TABLES[name].names].copy()
        df.insert(0, "rank", 0)
        tables[name] = df
    return Profile(Path("."), {0: dict(META)}, tables)


def base_ns(meta: dict[str, Any] = META) -> int:
    """Wall-clock ns of device time 0: the meta start time read as UTC (computed apart from
    the exporter's own code)."""
    import datetime as dt

    start = dt.datetime.fromisoformat(meta["start_time"]).replace(tzinfo=dt.timezone.utc)
    return round(start.timestamp() * 1_000_000) * 1000


def us_text(ns: int) -> str:
    """Exact µs text with 3 decimals."""
    return f"{ns // 1000}.{ns % 1000:03d}"


def rich_profile(**meta: Any) -> Profile:
    """Two steps with every kind of task, host launches, syncs, an optimizer annotation,
    a collective and allocator events (times in ns)."""
    h, t = [], []

    def op(eid, name, start, end, step, shapes="", dtypes="", thread=1):
        h.append(
            {
                "event_id": eid,
                "kind": "op",
                "name": name,
                "start_ns": start,
                "end_ns": end,
                "step": step,
                "input_shapes": shapes,
                "input_dtypes": dtypes,
                "thread": thread,
            }
        )

    def task(tid, op_id, launch_start, **row):
        t.append({"task_id": tid, "host_op_id": op_id, **row})
        h.append(
            {
                "event_id": 1000 + tid,
                "kind": "launch",
                "name": row.get("name", "x"),
                "start_ns": launch_start,
                "end_ns": launch_start + 500,
                "step": row["step"],
                "stream_id": row.get("stream_id", 0),
                "task_id": tid,
                "parent_id": op_id,
            }
        )

    # step 0 ------------------------------------------------------------------------------
    op(1, "aten::copy_", 0, 2_000, 0, "4,8;4,8", "float16;float16")
    task(
        0,
        1,
        100,
        kind="memcpy",
        task_type="DMA",
        name="aten::copy_ (H2D)",
        op_type="MEMCPY_H2D",
        block_dim=1,
        start_ns=1_000,
        end_ns=1_800,
        step=0,
        bytes=64,
        copy_kind="HOST_TO_DEVICE",
    )
    h.append(
        {
            "event_id": 2,
            "kind": "sync",
            "name": "aten::copy_ (H2D) (wait)",
            "start_ns": 600,
            "end_ns": 2_000,
            "stream_id": 0,
            "step": 0,
            "parent_id": 1,
        }
    )
    op(3, "aten::mm", 2_000, 3_000, 0, "128,256;256,512", "float16;float16")
    task(
        1,
        3,
        2_100,
        name="aten::mm",
        op_type="MatMul",
        task_type="AI_CORE",
        block_dim=20,
        start_ns=2_600,
        end_ns=12_600,
        wait_ns=800,
        step=0,
        input_shapes="128,256;256,512",
        input_dtypes="float16;float16",
        input_formats="ND;FRACTAL_NZ",
        output_shapes="128,512",
        output_dtypes="float16",
        output_formats="ND",
    )
    op(4, "aten::addmm", 3_000, 4_000, 0, "512;128,512;512,512", "float32;float32;float32")
    task(
        2,
        4,
        3_100,
        name="aten::addmm",
        op_type="MatMul",
        task_type="MIX_AIC",
        block_dim=12,
        start_ns=12_600,
        end_ns=20_600,
        step=0,
        input_shapes="512;128,512;512,512",
        input_dtypes="float32;float32;float32",
        input_formats="ND;ND;ND",
        output_shapes="128,512",
        output_dtypes="float32",
        output_formats="ND",
    )
    op(5, "aten::add_", 4_000, 5_000, 0, "", "int64;int64")
    task(
        3,
        5,
        4_100,
        name="aten::add_",
        op_type="Add",
        task_type="AI_CPU",
        block_dim=1,
        start_ns=20_600,
        end_ns=50_600,
        step=0,
        input_dtypes="int64;int64",
        input_formats="ND;ND",
        output_dtypes="int64",
        output_formats="ND",
    )
    op(6, "aten::nonzero", 5_000, 6_000, 0, "64", "float64")
    task(
        4,
        6,
        5_100,
        name="aten::nonzero",
        op_type="NonZero",
        task_type="AI_CPU",
        block_dim=1,
        start_ns=50_600,
        end_ns=80_600,
        step=0,
        input_shapes="64",
        input_dtypes="float64",
        input_formats="ND",
        output_shapes="64,1",
        output_dtypes="int64",
        output_formats="ND",
    )
    h.append(
        {
            "event_id": 7,
            "kind": "annotation",
            "name": "Optimizer.step#SGD.step",
            "start_ns": 6_000,
            "end_ns": 9_000,
            "step": 1,
        }
    )  # closes step 0: step+1
    op(8, "aten::mul_", 6_000, 7_000, 0, "512,512", "float32")
    task(
        5,
        8,
        6_100,
        name="aten::mul_",
        op_type="Mul",
        task_type="AI_VECTOR_CORE",
        block_dim=40,
        start_ns=80_600,
        end_ns=83_600,
        step=0,
        input_shapes="512,512",
        input_dtypes="float32",
        input_formats="ND",
        output_shapes="512,512",
        output_dtypes="float32",
        output_formats="ND",
    )
    op(9, "aten::add_", 7_000, 8_000, 0, "512,512;512,512", "float32;float32")
    task(
        6,
        9,
        7_100,
        name="aten::add_",
        op_type="Add",
        task_type="AI_VECTOR_CORE",
        block_dim=48,
        start_ns=83_600,
        end_ns=86_600,
        step=0,
        input_shapes="512,512;512,512",
        input_dtypes="float32;float32",
        input_formats="ND;ND",
        output_shapes="512,512",
        output_dtypes="float32",
        output_formats="ND",
    )
    task(
        7,
        -1,
        8_100,
        kind="event_record",
        task_type="EVENT",
        name="aclrtRecordEvent",
        op_type="EVENT_RECORD",
        block_dim=0,
        start_ns=86_600,
        end_ns=86_600,
        step=0,
    )
    # step 1: a collective on stream 1 overlapping a kernel ---------------------------------
    op(10, "aten::mm", 90_000, 91_000, 1, "128,256;256,512", "bfloat16;bfloat16")
    task(
        8,
        10,
        90_100,
        name="aten::mm",
        op_type="MatMul",
        task_type="AI_CORE",
        block_dim=24,
        start_ns=91_000,
        end_ns=101_000,
        step=1,
        input_shapes="128,256;256,512",
        input_dtypes="bfloat16;bfloat16",
        input_formats="ND;ND",
        output_shapes="128,512",
        output_dtypes="bfloat16",
        output_formats="ND",
    )
    op(11, "c10d::allreduce_", 91_000, 92_000, 1, "1048576", "float32")
    task(
        9,
        11,
        91_100,
        kind="collective",
        task_type="HCCL",
        name="hcom_allreduce_",
        op_type="allreduce",
        block_dim=1,
        stream_id=1,
        start_ns=95_000,
        end_ns=135_000,
        step=1,
        bytes=4 * 1024 * 1024,
        collective="allreduce",
        algorithm="mesh",
        world_size=4,
    )
    h.append(
        {
            "event_id": 12,
            "kind": "sync",
            "name": "aclrtSynchronizeDevice",
            "start_ns": 92_000,
            "end_ns": 135_500,
            "step": 1,
        }
    )
    h.append(
        {
            "event_id": 13,
            "kind": "sync",
            "name": "task queue full",
            "start_ns": 91_500,
            "end_ns": 91_600,
            "stream_id": 0,
            "step": 1,
        }
    )
    h.append(
        {
            "event_id": 14,
            "kind": "api",
            "name": "aclrtCreateEvent",
            "start_ns": 88_000,
            "end_ns": 88_700,
            "step": 1,
        }
    )
    steps = [
        {"step": 0, "start_ns": 0, "end_ns": 9_000, "source": "optimizer"},
        {"step": 1, "start_ns": 9_000, "end_ns": 136_000, "source": "end of run"},
    ]
    mib = 1024 * 1024
    memory = [
        {
            "time_ns": 0,
            "action": "segment_alloc",
            "address": 1 << 32,
            "size": 2 * mib,
            "allocated": 0,
            "reserved": 2 * mib,
            "active": 0,
        },
        {
            "time_ns": 0,
            "action": "malloc",
            "address": 1 << 32,
            "size": 1024,
            "allocated": 1024,
            "reserved": 2 * mib,
            "active": 1024,
            "tag": "aten::empty",
            "step": 0,
        },
        {
            "time_ns": 2_000,
            "action": "malloc",
            "address": (1 << 32) + 1024,
            "size": 512 * 1024,
            "allocated": 525312,
            "reserved": 2 * mib,
            "active": 525312,
            "tag": "aten::mm",
            "step": 0,
        },
        {
            "time_ns": 7_000,
            "action": "free",
            "address": 1 << 32,
            "size": 1024,
            "allocated": 524288,
            "reserved": 2 * mib,
            "active": 524288,
            "tag": "aten::empty",
            "step": 0,
        },
        {
            "time_ns": 8_000,
            "action": "malloc",
            "address": 1 << 32,
            "size": 1024,
            "allocated": 525312,
            "reserved": 2 * mib,
            "active": 525312,
            "tag": "aten::add_",
            "step": 0,
        },
        {
            "time_ns": 90_000,
            "action": "segment_alloc",
            "address": 1 << 33,
            "size": 20 * mib,
            "allocated": 525312,
            "reserved": 22 * mib,
            "active": 525312,
            "step": 1,
        },
        {
            "time_ns": 91_000,
            "action": "free",
            "address": 1 << 32,
            "size": 1024,
            "allocated": 524288,
            "reserved": 22 * mib,
            "active": 524288,
            "tag": "aten::add_",
            "step": 1,
        },
    ]
    return make_profile(tasks=t, host_events=h, memory=memory, steps=steps, **meta)
