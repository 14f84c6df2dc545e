"""AI CPU ops: which ops fell back to the AI CPU, their cost, and the dtype or op to change.

A task whose dtypes include one listed in ``rules/aicpu.yaml`` (int64, float64, complex) is a
dtype fallback: the same op runs on the AI Core in the suggested dtype. Other AI CPU ops
(NonZero, Sort, Unique ...) always run there: the op itself has to change.

Each task's ``source`` says whose code made it: ``user``, or a framework internal
(``framework`` in ``rules/aicpu.yaml``: BatchNorm's num_batches_tracked counter, found by the
op's module; the GradScaler's float64 inverse scale and the optimizer's step counters, found by
the host range the op ran in). Framework tasks get advice for their source, not a dtype change
the user cannot make.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from msprof_py.analyzers import intervals, shapes
from msprof_py.analyzers.context import AICPU_TYPES, KERNEL, RankData, per_rank, share_of
from msprof_py.analyzers.findings import aicpu_advice

COLUMNS = [
    "rank",
    "op_type",
    "name",
    "input_dtypes",
    "count",
    "total_ns",
    "mean_ns",
    "max_ns",
    "share_of_step",
    "reason",
    "source",
    "change",
    "suggestion",
]


@per_rank
def tasks(data: RankData) -> pd.DataFrame:
    """The analysed AI CPU tasks with ``reason`` (``dtype <name>`` or ``op``), ``to_dtype``
    (the dtype to run in instead, or empty) and ``suggestion``."""
    t = data.tasks
    t = t[(t["kind"] == KERNEL) & t["task_type"].isin(AICPU_TYPES)]
    advice = aicpu_advice()
    dtype_rules: dict = advice["dtypes"]
    codes, uniques = shapes.factorize(t["input_dtypes"], t["output_dtypes"])
    found = []
    for ins, outs in uniques:
        names = [d for d in f"{ins};{outs}".split(";") if d]
        hit = next((d for d in dtype_rules if d in names), "")
        found.append(hit)
    hit = np.array([*found, ""], dtype=object)[codes]
    op_rules: dict = advice["ops"]
    op_text = t["op_type"].astype(object).map(op_rules).fillna(advice["default"]).to_numpy()
    reason = np.where(hit != "", "dtype " + hit.astype(str), "op")
    to_dtype = np.array([dtype_rules[h]["to"] if h else "" for h in hit], dtype=object)
    text = np.array([dtype_rules[h]["text"] if h else "" for h in hit], dtype=object)
    suggestion = np.where(hit != "", text, op_text)
    source, framework_text = sources(data, t)
    framework = source != "user"
    suggestion = np.where(framework, framework_text, suggestion)
    to_dtype = np.where(framework, "", to_dtype)
    return t.assign(reason=reason, to_dtype=to_dtype, suggestion=suggestion, source=source)


def sources(data: RankData, t: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per task: ``user`` or the framework source (a module class or a host range name), and
    the framework's advice text (empty for user code)."""
    rules = aicpu_advice().get("framework") or {}
    source = np.full(len(t), "user", dtype=object)
    text = np.full(len(t), "", dtype=object)
    if t.empty:
        return source, text
    ops = data.all_host_ops.set_index("event_id")
    op_ids = t["host_op_id"].to_numpy()
    module = ops["module"].reindex(op_ids).astype(object).fillna("").astype(str)
    in_graph = graph_modules(data, t["name"]).to_numpy()
    module = module.where(in_graph == "", in_graph)
    last = module.str.rsplit("/", n=1).str[-1].to_numpy()
    for cls, advice in (rules.get("modules") or {}).items():
        hit = last == cls
        source[hit], text[hit] = cls, " ".join(str(advice).split())
    starts = ops["start_ns"].reindex(op_ids).to_numpy()
    ann = data.all_host[data.all_host["kind"] == "annotation"]
    names = ann["name"].astype(str)
    for prefix, advice in (rules.get("ranges") or {}).items():
        rng = ann[names.str.startswith(prefix).to_numpy(bool)]
        if rng.empty:
            continue
        cover = intervals.Coverage(rng["start_ns"].to_numpy(), rng["end_ns"].to_numpy())
        hit = cover.contains(np.nan_to_num(starts, nan=-1).astype(np.int64)) & (source == "user")
        label = prefix.rstrip(".")
        source[hit], text[hit] = label, " ".join(str(advice).split())
    return source, text


def module_counter_tasks(data: RankData) -> np.ndarray:
    """Task ids of the analysed AI CPU tasks that update a module's own counter (framework
    sources keyed by module class in ``rules/aicpu.yaml``: BatchNorm's num_batches_tracked).
    No other op of the step reads the counter, so a compiled graph's stream plan runs these
    on streams of their own, beside the model's chain."""
    t = tasks(data)
    if t.empty:
        return np.zeros(0, np.int64)
    modules = (aicpu_advice().get("framework") or {}).get("modules") or {}
    hit = t["source"].isin(list(modules)).to_numpy(bool)
    return t.loc[hit, "task_id"].to_numpy(np.int64)


def graph_modules(data: RankData, names: pd.Series) -> pd.Series:
    """Per task name, the nn.Module class path its graph kernel records ("" for eager tasks,
    and for a name whose kernels in different graphs ran in different modules)."""
    kernels = data.graph_kernels
    empty = pd.Series("", index=names.index, dtype=object)
    if kernels.empty or "module" not in kernels.columns:
        return empty
    by_name = kernels[["name", "module"]].astype(str).drop_duplicates()
    by_name = by_name[~by_name["name"].duplicated(keep=False)].set_index("name")["module"]
    return names.astype(str).map(by_name).fillna("").astype(object)


@per_rank
def table(data: RankData) -> pd.DataFrame:
    """AI CPU ops by total time, with the reason and what to change."""
    t = tasks(data)
    if t.empty:
        return pd.DataFrame(columns=COLUMNS)
    keys = ["op_type", "name", "input_dtypes", "reason", "source", "to_dtype", "suggestion"]
    g = t.groupby(keys, sort=False, observed=True)["duration_ns"]
    out = g.agg(count="size", total_ns="sum", max_ns="max").reset_index()
    out["mean_ns"] = out["total_ns"] / out["count"]
    out["share_of_step"] = share_of(out["total_ns"], data.step_time_ns)
    out["change"] = np.where(
        out["source"] != "user",
        "framework internal (" + out["source"].astype(str) + ")",
        np.where(
            out["to_dtype"] != "",
            "run in " + out["to_dtype"].astype(str),
            "replace " + out["op_type"].astype(str),
        ),
    )
    out.insert(0, "rank", data.rank)
    out = out.sort_values("total_ns", ascending=False, kind="stable")
    return out[COLUMNS].reset_index(drop=True)
