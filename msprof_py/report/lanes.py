"""Who ran what where: the timeline's lanes (host threads by role, launches, device streams by
role), the unit of each device task and its colour. Torch-free, pandas only."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

#: device units in legend order, with their colours (distinct at a glance, colour-blind safe-ish)
UNIT_COLORS: dict[str, str] = {
    "cube": "#1f77b4",
    "vector": "#2ca02c",
    "MIX": "#17becf",
    "AI CPU": "#d62728",
    "DMA H2D": "#ff7f0e",
    "DMA D2H": "#e7ba52",
    "DMA D2D": "#8c564b",
    "HCCL": "#9467bd",
    "TransData": "#e377c2",
    "memset": "#bcbd22",
    "event": "#7f7f7f",
    "other": "#aaaaaa",
}
#: host span kinds, with their colours
HOST_COLORS: dict[str, str] = {
    "host op": "#6b6b6b",
    "sync": "#c44e52",
    "annotation": "#b5b5b5",
    "python": "#9ecae1",
    "launch": "#4c72b0",
}
#: host event kinds drawn on a thread's lane (launches get a lane of their own)
THREAD_KINDS = ("op", "sync", "python", "annotation")

_TASK_UNITS = {
    "AI_CORE": "cube",
    "AI_VECTOR_CORE": "vector",
    "MIX_AIC": "MIX",
    "MIX_AIV": "MIX",
    "AI_CPU": "AI CPU",
    "HCCL": "HCCL",
    "EVENT": "event",
}
_COPY_UNITS = {
    "HOST_TO_DEVICE": "DMA H2D",
    "DEVICE_TO_HOST": "DMA D2H",
    "DEVICE_TO_DEVICE": "DMA D2D",
}


def _per_value(column: pd.Series, fn: Any) -> np.ndarray:
    """``fn`` of each value of ``column`` as a string (missing: ``""``), computed once per
    distinct value: fast on categoricals and Arrow strings of millions of rows."""
    codes, uniques = pd.factorize(column)
    values = [fn(str(u)) for u in uniques] + [fn("")]
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out[codes]  # code -1 (missing) takes the last


def task_units(t: pd.DataFrame) -> np.ndarray:
    """The unit of each device task: cube, vector, MIX, AI CPU, DMA H2D/D2H/D2D, HCCL,
    TransData (a format conversion, whatever core ran it), memset, event or other."""
    task_type = _per_value(t["task_type"], str)
    unit = _per_value(t["task_type"], lambda v: _TASK_UNITS.get(v, "other"))
    kind = _per_value(t["kind"], str)
    if "copy_kind" in t:
        copy_kind = _per_value(t["copy_kind"], lambda v: _COPY_UNITS.get(v, ""))
        dma = (task_type == "DMA") | (kind == "memcpy")
        found = copy_kind != ""
        unit[dma & found] = copy_kind[dma & found]
        unit[dma & ~found] = "DMA D2D"
    unit[kind == "memset"] = "memset"
    unit[kind == "collective"] = "HCCL"
    trans = _per_value(t["op_type"], lambda v: v == "TransData").astype(bool) | _per_value(
        t["name"], lambda v: "TransData" in v
    ).astype(bool)
    unit[trans] = "TransData"
    return unit


def host_units(h: pd.DataFrame) -> np.ndarray:
    """The colour class of each host span: host op, sync, annotation, python or launch."""
    return _per_value(h["kind"], lambda k: "host op" if k == "op" else k)


def stream_role(t: pd.DataFrame) -> str:
    """A stream's role from what it ran most (by time): HCCL, copy or compute."""
    units = pd.Series(task_units(t))
    dur = pd.Series((t["end_ns"] - t["start_ns"]).to_numpy())
    by = dur.groupby(units.to_numpy()).sum()
    if by.empty:
        return "compute"
    hccl = by.get("HCCL", 0)
    copy = sum(by.get(u, 0) for u in ("DMA H2D", "DMA D2H", "DMA D2D"))
    rest = by.sum() - hccl - copy
    if hccl >= max(copy, rest) and hccl > 0:
        return "HCCL"
    if copy > rest:
        return "copy"
    return "compute"


def thread_roles(h: pd.DataFrame) -> dict[int, str]:
    """A name for each host thread that ran ops: the main thread (the most forward ops),
    the autograd thread (backward ops), the DataLoader pin thread (pin_memory), the device
    runtime (thread 0), else ``thread N`` in order of first appearance.

    Guesses: the recorder stores each event's thread id, not the thread's name, so a role is
    read off what the thread ran (a collector recording ``threading`` names would let this
    name them for certain)."""
    ops = h[h["kind"].astype(str).isin(THREAD_KINDS)]
    if ops.empty:
        return {}
    names = ops["name"].astype(str).str.lower()
    backward = names.str.contains("backward", regex=False)
    threads = ops["thread"].to_numpy()
    order = list(dict.fromkeys(threads.tolist()))
    forward = pd.Series(~backward.to_numpy()).groupby(threads).sum()
    main = int(forward.reindex(order).idxmax()) if forward.max() > 0 else order[0]
    roles: dict[int, str] = {}
    used: dict[str, int] = {}
    others = 0
    for thread in order:
        mine = threads == thread
        if thread == main:
            role = "main thread"
        elif thread == 0:
            role = "runtime"
        elif backward.to_numpy()[mine].any():
            role = "autograd thread"
        elif names.to_numpy()[mine].astype(str).tolist() and any(
            "pin_memory" in n for n in names.to_numpy()[mine]
        ):
            role = "DataLoader pin thread"
        else:
            others += 1
            role = f"thread {others}"
        used[role] = used.get(role, 0) + 1
        roles[int(thread)] = role if used[role] == 1 else f"{role} {used[role]}"
    return roles


def task_queue_on(meta: dict[str, Any]) -> bool:
    """Whether the rank ran with torch_npu's task queue (launches on a stage-2 thread)."""
    spec = meta.get("device_spec") or {}
    value = (spec.get("dispatch") or {}).get("task_queue")
    if isinstance(value, dict):
        value = value.get("value")
    env = (meta.get("env") or {}).get("TASK_QUEUE_ENABLE")
    if env is not None:
        return str(env).strip() not in ("0", "")
    return bool(value)
