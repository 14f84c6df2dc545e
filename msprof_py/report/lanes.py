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


def thread_roles(h: pd.DataFrame, names: dict[int, str] | None = None) -> dict[int, str]:
    """A lane name for each host thread that ran ops, main thread first.

    ``names``: the threads' recorded names (:meth:`Profile.thread_names`: ``MainThread``,
    ``pt_autograd_0``, ``Thread-2 (_pin_memory_loop)`` ...), used as they are. A thread without
    one (a profile recorded before names were) gets a role read off what it ran: the main
    thread (the most forward ops), the autograd thread (backward ops), the DataLoader pin
    thread (pin_memory), the device runtime (thread 0), else ``thread N`` in order of first
    appearance. Two threads of one name are told apart by a number (``name 2``)."""
    ops = h[h["kind"].astype(str).isin(THREAD_KINDS)]
    if ops.empty:
        return {}
    names = names or {}
    lowered = ops["name"].astype(str).str.lower()
    backward = lowered.str.contains("backward", regex=False).to_numpy()
    lowered_values = lowered.to_numpy()
    threads = ops["thread"].to_numpy()
    order = list(dict.fromkeys(threads.tolist()))
    named_main = [t for t in order if names.get(int(t)) == "MainThread"]
    forward = pd.Series(~backward).groupby(threads).sum()
    if named_main:
        main = named_main[0]
    else:
        main = int(forward.reindex(order).idxmax()) if forward.max() > 0 else order[0]
    order.sort(key=lambda thread: thread != main)  # stable: the rest in order of appearance
    roles: dict[int, str] = {}
    used: dict[str, int] = {}
    others = 0
    for thread in order:
        mine = threads == thread
        if int(thread) in names:
            role = names[int(thread)]
        elif thread == main:
            role = "main thread"
        elif thread == 0:
            role = "runtime"
        elif backward[mine].any():
            role = "autograd thread"
        elif any("pin_memory" in n for n in lowered_values[mine]):
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
