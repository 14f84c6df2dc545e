"""A stored msprof-py profile as a Kineto (PyTorch profiler) trace, for Holistic Trace Analysis.

Benchmark code, not an exporter: it writes what ``hta.trace_analysis.TraceAnalysis`` reads (one
``rank-<r>.json`` per rank with ``distributedInfo.rank`` and ``traceEvents``), mapping every row
of the profile to the Kineto event a CUDA run would have produced:

=====================  =====================================================================
profile row            Kineto event (``ph`` "X" unless noted; times in microseconds)
=====================  =====================================================================
task, kind kernel      ``kernel``, named by its op type, on ``pid`` device / ``tid`` stream
task, collective       ``kernel`` named ``ncclDevKernel_<Collective>_<algorithm>``
task, memcpy/memset    ``gpu_memcpy`` ("Memcpy HtoD (Pageable -> Device)" ...) / ``gpu_memset``
task, event record     ``cuda_sync`` "Event Record" / "Stream Wait Event"
host event, launch     ``cuda_runtime`` cudaLaunchKernel / cudaMemcpyAsync / cudaMemsetAsync /
                       cudaEventRecord / cudaStreamWaitEvent, ``correlation`` = the task's
host event, op         ``cpu_op`` with ``External id`` and ``Sequence number``
host event, sync/api   ``cuda_runtime`` (cudaDeviceSynchronize, cudaStreamSynchronize ...)
host event, python     ``python_function``
host event, annotation ``user_annotation``
step (steps table)     ``user_annotation`` "ProfilerStep#<n>" (``steps=False`` leaves them out)
memory event           ``[memory]`` instant event (``ph`` "i") with Kineto's allocator args
=====================  =====================================================================

Kernels, launches and copies are linked by ``correlation`` (task id + 1) as CUPTI links them;
device tasks carry ``External id`` of the host op that launched them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from msprof_py.profile import load

COPY_NAMES = {
    ("HOST_TO_DEVICE", False): "Memcpy HtoD (Pageable -> Device)",
    ("HOST_TO_DEVICE", True): "Memcpy HtoD (Pinned -> Device)",
    ("DEVICE_TO_HOST", False): "Memcpy DtoH (Device -> Pageable)",
    ("DEVICE_TO_HOST", True): "Memcpy DtoH (Device -> Pinned)",
    ("DEVICE_TO_DEVICE", False): "Memcpy DtoD (Device -> Device)",
    ("DEVICE_TO_DEVICE", True): "Memcpy DtoD (Device -> Device)",
}
LAUNCH_NAMES = {
    "kernel": "cudaLaunchKernel",
    "collective": "cudaLaunchKernel",
    "memcpy": "cudaMemcpyAsync",
    "memset": "cudaMemsetAsync",
    "event_record": "cudaEventRecord",
    "event_wait": "cudaStreamWaitEvent",
}
HOST_CATEGORIES = {
    "op": "cpu_op",
    "launch": "cuda_runtime",
    "sync": "cuda_runtime",
    "api": "cuda_runtime",
    "python": "python_function",
    "annotation": "user_annotation",
    "step": "user_annotation",
}


def _sync_name(name: str) -> str:
    low = name.lower()
    if "device" in low:
        return "cudaDeviceSynchronize"
    if "event" in low:
        return "cudaEventSynchronize"
    return "cudaStreamSynchronize"


def _us(ns: np.ndarray) -> np.ndarray:
    return ns / 1000.0


def _q(values: pd.Series) -> pd.Series:
    """JSON-quoted strings, quoting each distinct value once."""
    cat = values.astype("category")
    quoted = [json.dumps(str(c)) for c in cat.cat.categories]
    return pd.Series(np.asarray(quoted, dtype=object)[cat.cat.codes.to_numpy()], index=values.index)


def _device_events(tasks: pd.DataFrame, device: int) -> Iterator[str]:
    kind = tasks["kind"].astype(str)
    name = tasks["op_type"].astype(str).where(kind == "kernel", "")
    coll = kind == "collective"
    name[coll] = (
        "ncclDevKernel_"
        + tasks.loc[coll, "collective"].astype(str).str.capitalize()
        + "_"
        + tasks.loc[coll, "algorithm"].astype(str)
    )
    copy = kind == "memcpy"
    name[copy] = [
        COPY_NAMES.get((k, bool(p)), "Memcpy DtoD (Device -> Device)")
        for k, p in zip(tasks.loc[copy, "copy_kind"], tasks.loc[copy, "pinned"], strict=True)
    ]
    name[kind == "memset"] = "Memset (Device)"
    name[kind == "event_record"] = "Event Record"
    name[kind == "event_wait"] = "Stream Wait Event"
    cat = np.select(
        [kind.isin(["kernel", "collective"]).to_numpy(), copy.to_numpy(), (kind == "memset")],
        ["kernel", "gpu_memcpy", "gpu_memset"],
        "cuda_sync",
    )
    dur_ns = (tasks["end_ns"] - tasks["start_ns"]).clip(lower=0).to_numpy()
    secs = np.maximum(dur_ns, 1) / 1e9
    bw = np.where(copy, tasks["bytes"].to_numpy() / secs / 1e9, 0.0)
    cols = zip(
        cat,
        _q(name),
        tasks["stream_id"].to_numpy(),
        _us(tasks["start_ns"].to_numpy()),
        _us(dur_ns),
        tasks["task_id"].to_numpy() + 1,
        tasks["host_op_id"].to_numpy(),
        tasks["bytes"].to_numpy(),
        bw,
        tasks["block_dim"].to_numpy(),
        strict=True,
    )
    for c, n, s, ts, dur, corr, ext, nbytes, gbps, blocks in cols:
        args = f'"device": {device}, "context": 1, "stream": {s}, "correlation": {corr}, '
        if c == "gpu_memcpy" or c == "gpu_memset":
            args += f'"bytes": {nbytes}, "memory bandwidth (GB/s)": {gbps:.6f}, '
        elif c == "kernel":
            args += f'"grid": [{blocks}, 1, 1], "block": [256, 1, 1], '
        yield (
            f'{{"ph": "X", "cat": "{c}", "name": {n}, "pid": {device}, "tid": {s}, '
            f'"ts": {ts:.3f}, "dur": {dur:.3f}, "args": {{{args}"External id": {ext}}}}}'
        )


def _host_events(host: pd.DataFrame, tasks: pd.DataFrame, pid: int) -> Iterator[str]:
    kind = host["kind"].astype(str)
    name = host["name"].astype(str)
    task_kind = tasks.set_index("task_id")["kind"].astype(str)
    launch = kind == "launch"
    launched = task_kind.reindex(host.loc[launch, "task_id"]).to_numpy()
    name[launch] = [LAUNCH_NAMES.get(k, "cudaLaunchKernel") for k in launched]
    sync = kind == "sync"
    name[sync] = name[sync].map(_sync_name)
    cat = kind.map(HOST_CATEGORIES).fillna("cpu_op")
    main = int(host.loc[kind == "op", "thread"].mode().iloc[0]) if (kind == "op").any() else pid
    tid = host["thread"].to_numpy()
    tid = np.where(tid == 0, main, tid)
    ext = np.where(launch | sync, host["parent_id"].to_numpy(), host["event_id"].to_numpy())
    corr = np.where(launch, host["task_id"].to_numpy() + 1, -1)
    cols = zip(
        cat.to_numpy(),
        _q(name),
        tid,
        _us(host["start_ns"].to_numpy()),
        _us((host["end_ns"] - host["start_ns"]).clip(lower=0).to_numpy()),
        ext,
        corr,
        host["sequence"].to_numpy(),
        strict=True,
    )
    for c, n, t, ts, dur, e, k, seq in cols:
        if c == "cuda_runtime":
            args = f'"External id": {e}, "cbid": 211'
            if k >= 0:
                args += f', "correlation": {k}'
        elif c == "cpu_op" and seq >= 0:
            args = f'"External id": {e}, "Sequence number": {seq}, "Fwd thread id": 0'
        else:
            args = f'"External id": {e}'
        yield (
            f'{{"ph": "X", "cat": "{c}", "name": {n}, "pid": {pid}, "tid": {t}, '
            f'"ts": {ts:.3f}, "dur": {dur:.3f}, "args": {{{args}}}}}'
        )


def _step_events(steps: pd.DataFrame, pid: int, tid: int) -> Iterator[str]:
    for step, start, end in zip(steps["step"], steps["start_ns"], steps["end_ns"], strict=True):
        yield (
            f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{step}", '
            f'"pid": {pid}, "tid": {tid}, "ts": {start / 1000:.3f}, '
            f'"dur": {(end - start) / 1000:.3f}, "args": {{"External id": -1}}}}'
        )


def _memory_events(memory: pd.DataFrame, pid: int, tid: int, device: int) -> Iterator[str]:
    size = np.where(memory["action"].astype(str).str.contains("free"), -1, 1) * memory["size"]
    cols = zip(
        _us(memory["time_ns"].to_numpy()),
        memory["address"].to_numpy(),
        size,
        memory["allocated"].to_numpy(),
        memory["reserved"].to_numpy(),
        strict=True,
    )
    for ts, addr, nbytes, alloc, res in cols:
        yield (
            f'{{"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", '
            f'"pid": {pid}, "tid": {tid}, "ts": {ts:.3f}, "args": {{"Device Type": 1, '
            f'"Device Id": {device}, "Addr": {addr}, "Bytes": {nbytes}, '
            f'"Total Allocated": {alloc}, "Total Reserved": {res}}}}}'
        )


def write_kineto(profile_path: str | Path, out: str | Path, *, steps: bool = True) -> list[Path]:
    """Write one Kineto trace per rank of the profile at ``profile_path`` into folder ``out``;
    the files written. ``steps``: mark each step with a ``ProfilerStep#<n>`` annotation."""
    profile = load(profile_path)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for rank in profile.ranks:
        one = profile.for_rank(rank)
        meta = one.meta[rank]
        pid = int(meta.get("pid") or 1)
        device = int(meta.get("device_id", rank) or 0)
        tasks = one.tasks.sort_values("start_ns", kind="stable")
        host = one.host_events.assign(_neg_end=-one.host_events["end_ns"])
        host = host.sort_values(["start_ns", "_neg_end"], kind="stable")  # parents first
        ops = host[host["kind"] == "op"]
        main = int(ops["thread"].mode().iloc[0]) if len(ops) else pid
        header = {
            "schemaVersion": 1,
            "distributedInfo": {
                "backend": "nccl",
                "rank": rank,
                "world_size": int(meta.get("world_size") or 1),
            },
            "deviceProperties": [{"id": device, "name": str(meta.get("soc_version", "NPU"))}],
            "displayTimeUnit": "ms",
            "baseTimeNanoseconds": 0,
        }
        path = out / f"rank-{rank}.json"
        parts: list[Iterator[str]] = [_host_events(host, one.tasks, pid)]
        if steps:
            marked = one.steps[one.steps["source"] != "end of run"]
            parts.append(_step_events(marked, pid, main))
        parts += [_device_events(tasks, device), _memory_events(one.memory, pid, main, device)]
        with path.open("w", encoding="utf-8") as fh:
            text = json.dumps(header)
            fh.write(text[:-1] + ', "traceEvents": [\n')
            first = True
            for part in parts:
                for event in part:
                    if not first:
                        fh.write(",\n")
                    fh.write(event)
                    first = False
            fh.write("\n]}\n")
        written.append(path)
    return written
