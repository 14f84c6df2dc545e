"""``communication.json`` and ``communication_matrix.json`` (torch_npu layout) from collectives.

What the profile says about a collective: its op, algorithm, ranks (``world_size``), the bytes
of its buffer (``bytes``: as in :mod:`msprof_py.device.collectives`) and its device span. From
that:

* **Elapse** is the task's duration. A rank's HCCL task begins when that rank is ready and
  first waits for its peers (``notify_wait_ns``): that is its **Wait** time and, as the wait
  comes before any transfer, also its **Synchronization** time; **Transit** is the rest, and
  **Idle** (Elapse - Transit - Wait) is 0. The ratios are ``wait / (wait + transit)``.
* **Transit size** is what one rank sends, with the bus factors of nccl-tests (all-reduce
  ``2(p-1)/p x n``, all-gather and reduce-scatter ``(p-1)/p x n``, broadcast ``n``).
* **Transport**: flat algorithms stay inside one server and are reported as ``HCCS`` (the
  link) and ``SDMA`` (the engine that moves HCCS traffic, as CANN aggregates it); the
  hierarchical algorithm (several servers) is reported as ``RDMA``, its bottleneck. The other
  transports are listed with zeros, as CANN lists them.
* **Size distribution**: one packet per collective, keyed by its size in MB.
* The **matrix** has one link per peer (mesh, halving-doubling, NHR, hierarchical: the size
  spread evenly over the ``p-1`` peers) or to the next rank (ring), plus the rank's ``LOCAL``
  self-link, integrated per op type into ``-top1/-middle/-bottom1..3/-total`` entries as
  torch_npu integrates them.

Each step's ``collective`` dict ends with ``"Total Op Info"`` (msprof-analyze's compare needs
it). Collectives are grouped by the step their launch belongs to (``step{N}``; ``step``
without steps). A run without collectives gets ``{}``: msprof-analyze reads that as "no
communication" (a step without ``Total Op Info`` bandwidth would crash its compare).
MB = 2**20 bytes; bandwidth = MB / ms (GB/s as CANN computes it). The per-op JSON text is built
column-wise (a run may hold hundreds of thousands of collectives).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from msprof_py.exporters.frames import ExportData
from msprof_py.exporters.trace_events import Text, concat, jnum, jstr
from msprof_py.exporters.trace_view import WORLD_GROUP
from msprof_py.profile.atomic import create_atomically

MB = 1024 * 1024
TRANSPORTS = ("RDMA", "HCCS", "PCIE", "SDMA", "SIO")
TOTAL_OP_INFO = "Total Op Info"
TIME_INFO = "Communication Time Info"
BANDWIDTH_INFO = "Communication Bandwidth Info"
_HCCL_PATTERN = re.compile(
    r"send|reduce|invalid|broadcast|allreduce|receive|allgather|reducescatter|scatter|"
    r"alltoall|alltoallv|alltoallvc|batchsendrecv"
)
_BUS_FACTOR = {"allgather": 1.0, "reducescatter": 1.0}  # x (p-1)/p; all-reduce twice that


def bus_factor(op: str, p: int) -> float:
    """Bytes one rank sends per buffer byte (nccl-tests bus bandwidth factors)."""
    if p <= 1:
        return 0.0
    if op == "allreduce":
        return 2 * (p - 1) / p
    if op in _BUS_FACTOR:
        return (p - 1) / p
    return 1.0


def _ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``round(a / b, 4)``, 0 where ``b`` is 0 (torch_npu's ``compute_ratio``)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    out = np.divide(a, b, out=np.zeros_like(a), where=np.abs(b) > 1e-15)
    return np.round(out, 4)


def _rdma(algorithm: pd.Series) -> np.ndarray:
    """True where a collective crosses servers (reported as RDMA, else HCCS + SDMA)."""
    return algorithm.astype(str).str.startswith("hierarchical").to_numpy()


def collectives(data: ExportData) -> pd.DataFrame:
    """The rank's collectives: ``op_name``, ``key`` (``name@group``), ``step_key``, ``op``,
    ``algorithm``, ``world_size``, ``rdma``, ``start_us``, ``elapse_ms``, ``wait_ms``,
    ``time_ms`` (transit), ``size_mb``."""
    t = data.tasks
    c = t[t["kind"] == "collective"]
    if c.empty:
        return pd.DataFrame()
    p = c["world_size"].to_numpy(dtype=np.int64)
    op = c["collective"].astype(str).to_numpy(dtype=object)
    pf = np.maximum(p, 1).astype(np.float64)
    factor = np.where(op == "allreduce", 2 * (pf - 1) / pf, 1.0)
    factor = np.where(np.isin(op, list(_BUS_FACTOR)), (pf - 1) / pf, factor)
    factor = np.where(p <= 1, 0.0, factor)
    wait = c["notify_wait_ns"].to_numpy(dtype=np.int64)
    steps = c["step"].to_numpy(dtype=np.int64)
    step_key = np.where(steps >= 0, "step" + steps.astype(str), "step")
    if not data.has_steps:
        step_key = np.full(len(c), "step", dtype=object)
    return pd.DataFrame(
        {
            "op_name": c["kernel_name"].to_numpy(dtype=object),
            "key": c["kernel_name"].to_numpy(dtype=object) + f"@{WORLD_GROUP}",
            "step_key": step_key.astype(object),
            "step_order": np.where(steps >= 0, steps, -1) if data.has_steps else -1,
            "op": op,
            "algorithm": c["algorithm"].astype(str).to_numpy(dtype=object),
            "world_size": p,
            "rdma": _rdma(c["algorithm"]),
            "start_us": (c["start_ns"].to_numpy(dtype=np.int64) + data.info.base_ns) / 1000.0,
            "elapse_ms": c["dur_ns"].to_numpy(dtype=np.int64) / 1e6,
            "wait_ms": wait / 1e6,
            "time_ms": (c["dur_ns"].to_numpy(dtype=np.int64) - wait) / 1e6,
            "size_mb": c["bytes"].to_numpy(dtype=np.float64) * factor / MB,
        }
    ).sort_values(["step_order"], kind="stable")


def _entry(size: Text, time: Text, bw: Text, dist: Text) -> Text:
    return concat(
        '{"Transit Size(MB)":', size, ',"Transit Time(ms)":', time,
        ',"Bandwidth(GB/s)":', bw, ',"Size Distribution":', dist, "}",
    )  # fmt: skip


_ZERO_ENTRY = json.dumps(
    {
        "Transit Size(MB)": 0.0,
        "Transit Time(ms)": 0.0,
        "Bandwidth(GB/s)": 0,
        "Size Distribution": {},
    }
)


def _op_texts(coll: pd.DataFrame) -> Text:
    """``"<key>":{...}`` of every collective (column-wise JSON)."""
    size, time = jnum(coll["size_mb"]), jnum(coll["time_ms"])
    bw = jnum(_ratio(coll["size_mb"], coll["time_ms"]))
    has_size = pa.array((coll["size_mb"] > 0).to_numpy())
    dist = pc.if_else(has_size, concat('{"', size, '":[1,', time, "]}"), "{}")
    used = _entry(size, time, bw, dist)
    rdma = pa.array(coll["rdma"].to_numpy())
    bandwidth = concat(
        '{"RDMA":', pc.if_else(rdma, used, _ZERO_ENTRY),
        ',"HCCS":', pc.if_else(rdma, _ZERO_ENTRY, used),
        ',"PCIE":', _ZERO_ENTRY,
        ',"SDMA":', pc.if_else(rdma, _ZERO_ENTRY, used),
        ',"SIO":', _ZERO_ENTRY, "}",
    )  # fmt: skip
    wait = jnum(coll["wait_ms"])
    ratio = jnum(_ratio(coll["wait_ms"], coll["wait_ms"] + coll["time_ms"]))
    time_info = concat(
        '{"Start Timestamp(us)":', jnum(np.round(coll["start_us"].to_numpy(), 3)),
        ',"Elapse Time(ms)":', jnum(coll["elapse_ms"]), ',"Transit Time(ms)":', time,
        ',"Wait Time(ms)":', wait, ',"Synchronization Time(ms)":', wait,
        ',"Idle Time(ms)":0,"Wait Time Ratio":', ratio,
        ',"Synchronization Time Ratio":', ratio, "}",
    )  # fmt: skip
    return concat(
        jstr(coll["key"]), ':{"', TIME_INFO, '":', time_info, ',"', BANDWIDTH_INFO, '":',
        bandwidth, "}",
    )  # fmt: skip


def _total_info(coll: pd.DataFrame) -> dict[str, Any]:
    """``Total Op Info`` of a step's collectives (sums, ratios recomputed), as torch_npu
    computes it from the per-op entries."""
    transit, wait = float(coll["time_ms"].sum()), float(coll["wait_ms"].sum())
    ratio = float(_ratio(np.array([wait]), np.array([wait + transit]))[0])
    time_info = {
        "Elapse Time(ms)": float(coll["elapse_ms"].sum()),
        "Transit Time(ms)": transit,
        "Wait Time(ms)": wait,
        "Synchronization Time(ms)": wait,
        "Idle Time(ms)": 0.0,
        "Wait Time Ratio": ratio,
        "Synchronization Time Ratio": ratio,
    }
    bandwidth: dict[str, Any] = {}
    for transport in TRANSPORTS:
        if transport == "RDMA":
            mine = coll[coll["rdma"]]
        elif transport in ("HCCS", "SDMA"):
            mine = coll[~coll["rdma"]]
        else:
            mine = coll.iloc[:0]
        size, time = float(mine["size_mb"].sum()), float(mine["time_ms"].sum())
        packets = mine[mine["size_mb"] > 0].groupby("size_mb")["time_ms"].agg(["count", "sum"])
        bandwidth[transport] = {
            "Transit Size(MB)": size,
            "Transit Time(ms)": time,
            "Size Distribution": {
                key: [int(n), float(ms)]
                for key, n, ms in zip(
                    jnum(packets.index.to_numpy()).to_pylist(),
                    packets["count"],
                    packets["sum"],
                    strict=True,
                )
            },
            "Bandwidth(GB/s)": float(_ratio(np.array([size]), np.array([time]))[0]),
        }
    return {TIME_INFO: time_info, BANDWIDTH_INFO: bandwidth}


def communication_json(data: ExportData) -> str:
    """The text of ``communication.json`` (``{}`` without collectives)."""
    coll = collectives(data)
    if coll.empty:
        return "{}"
    ops = _op_texts(coll).to_pylist()
    keys = coll["step_key"].to_numpy()
    steps = []
    bounds = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1], True])
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        total = json.dumps(_total_info(coll.iloc[lo:hi]))
        collective = ",".join(ops[lo:hi]) + f',"{TOTAL_OP_INFO}":{total}'
        steps.append(f'{json.dumps(keys[lo])}:{{"collective":{{{collective}}},"p2p":{{}}}}')
    return "{" + ",".join(steps) + "}"


def communication(data: ExportData) -> dict[str, Any]:
    """The content of ``communication.json`` as a dict."""
    return json.loads(communication_json(data))


def links(data: ExportData) -> pd.DataFrame:
    """Every link of every collective: ``step_key, key, op_type, link, transport, size_mb,
    time_ms, bandwidth`` (see module docs)."""
    coll = collectives(data)
    if coll.empty:
        return pd.DataFrame()
    rank = data.info.rank
    p = coll["world_size"].to_numpy(dtype=np.int64)
    ring = (coll["algorithm"] == "ring").to_numpy()
    n_peers = np.where(p <= 1, 0, np.where(ring, 1, p - 1))
    rows = np.repeat(np.arange(len(coll)), n_peers + 1)  # + the LOCAL self-link
    first = np.concatenate([[0], np.cumsum(n_peers + 1)[:-1]])
    k = np.arange(len(rows)) - np.repeat(first, n_peers + 1)  # 0 = local, 1.. = peers
    pr = p[rows]
    peer = np.where(ring[rows], (rank + 1) % np.maximum(pr, 1), k - 1 + (k - 1 >= rank))
    local = k == 0
    dst = np.where(local, rank, peer)
    share = (coll["size_mb"].to_numpy() / np.maximum(n_peers, 1))[rows]
    time = coll["time_ms"].to_numpy()[rows]
    transport = np.where(coll["rdma"].to_numpy()[rows], "RDMA", "HCCS")
    op_type = [_op_type(name) for name in coll["op_name"]]
    return pd.DataFrame(
        {
            "step_key": coll["step_key"].to_numpy()[rows],
            "step_order": coll["step_order"].to_numpy()[rows],
            "op_name": coll["op_name"].to_numpy()[rows],
            "op_type": np.asarray(op_type, dtype=object)[rows],
            "link": [f"{rank}-{d}" for d in dst.tolist()],
            "transport": np.where(local, "LOCAL", transport),
            "size_mb": np.where(local, 0.0, share),
            "time_ms": np.where(local, 0.0, time),
        }
    ).assign(bandwidth=lambda f: _ratio(f["size_mb"], f["time_ms"]))


def _op_type(name: str) -> str:
    match = _HCCL_PATTERN.search(name.lower())
    return match.group() if match else name.split("__")[0]


def _link_entry(row: Any, with_name: bool = True) -> dict[str, Any]:
    entry = {
        "Transport Type": row.transport,
        "Transit Size(MB)": float(row.size_mb),
        "Transit Time(ms)": float(row.time_ms),
        "Bandwidth(GB/s)": float(row.bandwidth),
    }
    if with_name:
        entry["Op Name"] = row.op_name
    return entry


def communication_matrix(data: ExportData) -> dict[str, Any]:
    """The content of ``communication_matrix.json`` (``{}`` without collectives): per step,
    op type and link, the top1 / middle / bottom1-3 collectives by bandwidth and the total."""
    lk = links(data)
    out: dict[str, Any] = {}
    if lk.empty:
        return out
    keys = ["step_order", "step_key", "op_type", "link"]
    lk = lk.sort_values([*keys, "bandwidth"], ascending=[True] * 4 + [False], kind="stable")
    lk = lk.reset_index(drop=True)
    group = lk.groupby(keys, sort=False)
    lk["pos"] = group.cumcount()
    lk["n"] = group["bandwidth"].transform("size")
    totals = group.agg(size_mb=("size_mb", "sum"), time_ms=("time_ms", "sum"))
    totals = totals.join(group["transport"].first())
    picks = {
        "top1": lk["pos"] == 0,
        "middle": lk["pos"] == lk["n"] // 2,
        "bottom1": lk["pos"] == lk["n"] - 1,
        "bottom2": (lk["n"] >= 2) & (lk["pos"] == lk["n"] - 2),
        "bottom3": (lk["n"] >= 3) & (lk["pos"] == lk["n"] - 3),
    }
    group_name = f"@{WORLD_GROUP}"
    for label, mask in picks.items():
        for row in lk[mask].itertuples(index=False):
            step = out.setdefault(row.step_key, {"collective": {}, "p2p": {}})["collective"]
            step.setdefault(f"{row.op_type}-{label}{group_name}", {})[row.link] = _link_entry(row)
    for (_, step_key, op_type, link), row in zip(
        totals.index, totals.itertuples(index=False), strict=True
    ):
        step = out.setdefault(step_key, {"collective": {}, "p2p": {}})["collective"]
        step.setdefault(f"{op_type}-total{group_name}", {})[link] = {
            "Transport Type": row.transport,
            "Transit Size(MB)": float(row.size_mb),
            "Transit Time(ms)": float(row.time_ms),
            "Bandwidth(GB/s)": float(_ratio(np.array([row.size_mb]), np.array([row.time_ms]))[0]),
        }
    return out


def write_json_text(content: str, path: Path) -> None:
    """Write JSON text (never over an existing file)."""
    with create_atomically(path, "x", encoding="utf-8") as f:
        f.write(content)


def write_json(content: Any, path: Path) -> None:
    """Write JSON (never over an existing file)."""
    write_json_text(json.dumps(content, ensure_ascii=False), path)
