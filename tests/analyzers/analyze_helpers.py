"""Hand-built profiles for analyzer tests: rows with the schema's columns, known answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from msprof_py.profile import Profile
from msprof_py.profile.schema import TABLES, default_row

_TASK = default_row("tasks") | {
    "task_id": 0,
    "kind": "kernel",
    "task_type": "AI_VECTOR_CORE",
    "name": "aten::add",
    "op_type": "Add",
    "block_dim": 1,
    "step": 0,
}
_HOST = default_row("host_events") | {
    "event_id": 0,
    "kind": "op",
    "thread": 1,
    "stream_id": -1,
    "step": 0,
}
_MEMORY = default_row("memory") | {"action": "malloc", "step": 0}


class Builder:
    """Collects rows of one rank and builds a :class:`Profile` from them."""

    def __init__(self, rank: int = 0, **meta: Any) -> None:
        self.rank = rank
        self.meta = {"rank": rank, "device": "ascend910b", "host_time": "modeled"} | meta
        self.tasks: list[dict[str, Any]] = []
        self.host: list[dict[str, Any]] = []
        self.memory: list[dict[str, Any]] = []
        self.steps: list[dict[str, Any]] = []
        self.graphs: list[dict[str, Any]] = []
        self.graph_passes: list[dict[str, Any]] = []
        self.graph_kernels: list[dict[str, Any]] = []
        self.measured_waits: list[dict[str, Any]] = []

    # ---- rows -----------------------------------------------------------------------------

    def step(
        self, step: int, start: int, end: int, source: str = "optimizer", optimizer_id: int = -1
    ) -> Builder:
        row = {"step": step, "start_ns": start, "end_ns": end, "source": source}
        self.steps.append(row | {"optimizer_id": optimizer_id})
        return self

    def task(self, start: int, end: int, **cols: Any) -> int:
        row = _TASK | {"task_id": len(self.tasks), "launch_ns": start} | cols
        row |= {"start_ns": start, "end_ns": end}
        self.tasks.append(row)
        return int(row["task_id"])

    def event(self, kind: str, name: str, start: int, end: int, **cols: Any) -> int:
        row = _HOST | {"event_id": len(self.host), "kind": kind, "name": name} | cols
        row |= {"start_ns": start, "end_ns": end}
        self.host.append(row)
        return int(row["event_id"])

    def op(
        self,
        name: str,
        start: int,
        end: int,
        kernels: list[dict[str, Any]] | None = None,
        **cols: Any,
    ) -> int:
        """A host op and the kernels it launched (each a dict of task columns with
        ``start``/``end``); a launch span per kernel is added on the host."""
        op_id = self.event("op", name, start, end, **cols)
        for k in kernels or []:
            k = dict(k)
            s, e = k.pop("start"), k.pop("end")
            k.setdefault("step", cols.get("step", 0))
            tid = self.task(s, e, host_op_id=op_id, name=k.pop("name", name), **k)
            self.event(
                "launch",
                name,
                start,
                min(end, start + 1000),
                task_id=tid,
                parent_id=op_id,
                stream_id=0,
                step=cols.get("step", 0),
                thread=cols.get("thread", 1),
            )
        return op_id

    def graph_plan(
        self,
        graph: str,
        passes: list[tuple[str, str, bool, str]] = (),
        **cols: Any,
    ) -> int:
        """A graph plan (a ``graphs`` row; ``cols`` override its columns) and what its passes
        tried: ``(pass_name, ";"-joined nodes, hit, reason)``. Returns the plan id."""
        plan_id = len(self.graphs)
        row = default_row("graphs") | {
            "plan_id": plan_id,
            "graph": graph,
            "mode": "max-autotune",
            "step": 0,
        }
        self.graphs.append(row | cols)
        for i, (name, nodes, hit, reason) in enumerate(passes):
            self.graph_passes.append(
                default_row("graph_passes")
                | {
                    "plan_id": plan_id,
                    "graph": graph,
                    "index": i,
                    "pass_name": name,
                    "nodes": nodes,
                    "hit": hit,
                    "reason": reason,
                }
            )
        return plan_id

    def graph_call(
        self, graph: str, start: int, end: int, kernels: list[dict[str, Any]], **cols: Any
    ) -> int:
        """One call of ``graph``: its ``npu_graph::`` host op, one ``ModelExecute`` launch and
        its kernels (task columns with ``start``/``end``; ``name`` the node name)."""
        step = cols.get("step", 0)
        op_id = self.event("op", f"npu_graph::{graph}", start, end, **cols)
        first = -1
        for k in kernels:
            k = dict(k)
            s, e = k.pop("start"), k.pop("end")
            k.setdefault("step", step)
            k.setdefault("launch_ns", end)
            tid = self.task(s, e, host_op_id=op_id, **k)
            first = tid if first < 0 else first
        self.event(
            "launch",
            f"ModelExecute {graph}",
            max(start, end - 1000),
            end,
            task_id=first,
            parent_id=op_id,
            stream_id=0,
            step=step,
            thread=cols.get("thread", 1),
        )
        return op_id

    def wait(self, event_id: int, wall_ns: int, step: int = 0, wall_start_ns: int = 0) -> None:
        """A measured data-loading wait of annotation ``event_id`` (beside the timeline)."""
        name = next(str(h["name"]) for h in self.host if h["event_id"] == event_id)
        self.measured_waits.append(
            {"event_id": event_id, "name": name, "wall_start_ns": wall_start_ns}
            | {"wall_ns": wall_ns, "step": step}
        )

    def mem(self, t: int, allocated: int, reserved: int, **cols: Any) -> None:
        self.memory.append(
            _MEMORY
            | {"time_ns": t, "allocated": allocated, "reserved": reserved, "active": allocated}
            | cols
        )

    # ---- building -------------------------------------------------------------------------

    def frames(self) -> dict[str, pd.DataFrame]:
        rows = {
            "tasks": self.tasks,
            "host_events": self.host,
            "memory": self.memory,
            "steps": self.steps,
            "graphs": self.graphs,
            "graph_passes": self.graph_passes,
            "graph_kernels": self.graph_kernels,
            "measured_waits": self.measured_waits,
        }
        out = {}
        for name, table in TABLES.items():
            df = pd.DataFrame(rows[name], columns=table.names)
            schema = table.schema
            df = df.astype({f.name: _dtype(f.type) for f in schema})
            df.insert(0, "rank", self.rank)
            out[name] = df
        return out

    def build(self, path: str | Path = "hand-built") -> Profile:
        return Profile(Path(path), {self.rank: dict(self.meta)}, self.frames())


def _dtype(arrow_type: Any) -> str:
    text = str(arrow_type)
    return {"int64": "int64", "int32": "int32", "double": "float64", "bool": "bool"}.get(
        text, "object"
    )


def cluster(*builders: Builder) -> Profile:
    """A multi-rank profile from one builder per rank."""
    frames = [b.frames() for b in builders]
    tables = {name: pd.concat([f[name] for f in frames], ignore_index=True) for name in TABLES}
    meta = {b.rank: dict(b.meta) for b in builders}
    return Profile(Path("hand-built-cluster"), meta, tables)


def steps(b: Builder, count: int, length: int, start: int = 0) -> Builder:
    """``count`` consecutive steps of ``length`` ns from ``start`` (numbered from 0)."""
    for i in range(count):
        b.step(i, start + i * length, start + (i + 1) * length)
    return b


def chain(
    b: Builder,
    t0: int,
    ops: list[tuple[str, str, str, dict[str, Any]]],
    *,
    step: int = 0,
    thread: int = 1,
    module: str = "",
    host_ns: int = 1000,
    kernel_ns: int = 5000,
    dtype: str = "float32",
) -> int:
    """Ops one after another: ``(name, input_shapes, output_shape, task columns)``; each op
    takes ``host_ns`` on the host and launches one kernel of ``kernel_ns``, which starts when
    launched or when the previous kernel ends. Returns the time after the last kernel."""
    t = dev = t0
    for name, ins, out, cols in ops:
        n_in = len(ins.split(";")) if ins else 0
        dtypes = ";".join([dtype] * n_in)
        dev = max(t + host_ns, dev)
        kernel = {
            "start": dev,
            "end": dev + kernel_ns,
            "launch_ns": t + host_ns,
            "input_shapes": ins,
            "input_dtypes": dtypes,
            "output_shapes": out,
            "output_dtypes": dtype,
            **cols,
        }
        b.op(
            name,
            t,
            t + host_ns,
            [kernel],
            input_shapes=ins,
            input_dtypes=dtypes,
            step=step,
            thread=thread,
            module=module,
        )
        t += host_ns
        dev += kernel_ns
    return max(t, dev)


def save(profile: Profile, folder: Path) -> Path:
    """Write ``profile`` as one ``<rank>_ascend_pt/msprof_raw`` folder per rank under
    ``folder`` (the layout the collectors write); returns ``folder``."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    for rank in profile.ranks:
        raw = folder / f"host_{rank}_ascend_pt" / "msprof_raw"
        raw.mkdir(parents=True)
        (raw / "meta.json").write_text(json.dumps(profile.meta[rank]), encoding="utf-8")
        for name, table in TABLES.items():
            df = profile.table(name)
            df = df[df["rank"] == rank].drop(columns="rank")
            arrow = pa.Table.from_pandas(df, schema=table.schema, preserve_index=False)
            pq.write_table(arrow, raw / f"{name}-00000.parquet")
    return folder
