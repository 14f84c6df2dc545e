"""PyTorch profiler (Kineto) traces: ``*.pt.trace.json`` and ``*.pt.trace.json.gz``.

What ``torch.profiler`` writes (``prof.export_chrome_trace(...)`` or the
``tensorboard_trace_handler``) is one JSON object ``{"traceEvents": [...],
"deviceProperties": [...], "distributedInfo": {...}, ...}``. A path is such a file, or a folder
holding one (a TensorBoard log dir with one worker's trace); a folder with several is read as
one rank per trace when their ``distributedInfo.rank`` differ.

Times: Kineto's ``ts``/``dur`` are microseconds (with ns decimals); they become integer
nanoseconds with the trace's earliest ``ts`` as time 0 (the earliest over all the traces of a
multi-rank folder: the ranks stay on one clock). Host and device events share that clock.

What becomes what:

* **host_events** (in time order): complete (``ph`` "X") events of category ``cpu_op`` /
  ``operator`` -> kind ``op`` (``Input Dims`` / ``Input type`` -> ``input_shapes`` /
  ``input_dtypes`` in the ``"2,3;4"`` format, Kineto's C++ type names as torch dtype names:
  ``float`` -> ``float32``, ``c10::Half`` -> ``float16`` ...; ``Sequence number`` ->
  ``sequence``);
  ``user_annotation`` -> ``annotation`` (``ProfilerStep#N`` included); ``python_function`` ->
  ``python``; ``cuda_runtime`` / ``cuda_driver`` / ``runtime`` -> ``launch`` when it launched a
  device task of the trace (or its name is a launch, copy or memset call), ``sync`` for the
  ``...Synchronize`` calls and the synchronous copies (``cudaMemcpy``, not ``...Async``: the
  host waits for the copy; still linked to its copy task), ``api`` otherwise. A launch's or
  sync's ``parent_id`` is the innermost ``cpu_op`` enclosing it on its thread, and so is an
  op's (nested ops: ``aten::linear`` around ``aten::addmm``; from the time nesting per
  thread, :mod:`msprof_py.importers.nesting`), so that self times add up; ``thread`` is
  Kineto's ``tid``.
* **tasks**: ``kernel`` -> kind ``kernel``; ``gpu_memcpy`` -> ``memcpy`` (``copy_kind`` from
  the name ``Memcpy HtoD/DtoH/DtoD``, ``pinned`` when the name says ``Pinned`` or the copy is
  device to device; ``op_type`` ``MEMCPY_H2D`` / ``MEMCPY_D2H`` / ``MEMCPY_D2D``);
  ``gpu_memset`` -> ``memset`` (``op_type`` ``MEMSET``); ``stream_id`` is ``args.stream``,
  ``bytes`` ``args.bytes`` where given, ``block_dim`` the grid's block count. A kernel whose
  name holds ``nccl`` is a ``collective`` (``task_type`` ``HCCL``: our analysers' name for
  the communication engine; ``collective`` from ``args["Collective name"]`` or the kernel
  name: ``AllReduce`` -> ``allreduce``, ``AllGather``, ``ReduceScatter``, ``Broadcast``,
  ``SendRecv``, ``AllToAll``, ``Reduce``; ``algorithm`` ``ring``/``tree``/... from the name;
  ``world_size`` from ``args["Group size"]`` or ``distributedInfo``, ``bytes`` the input
  message, ``In msg nelems`` x the size of ``dtype``, of the kernel's args or of the
  ``record_param_comms`` op that launched it; 0 when neither says).
* **task_type of a GPU kernel**: ``AI_CORE`` (our analysers' matrix engine, the cube) for
  tensor-core work, recognised by name (``gemm``, ``conv``, ``cutlass``, ``xmma``, ``wgmma``,
  ``mma``, ``cublas``, ``cudnn``, ``flash``, ``attention``), ``AI_VECTOR_CORE`` (the vector
  units) for every other kernel, ``DMA`` for copies and memsets. Both kernel types count as
  device compute (busy time, utilisation); the peaks they are compared with come from a
  device spec, and a GPU is no device preset, so the rules that need one say ``SKIPPED``.
* **links**: a flow (``ph`` "s"/"f", category ``ac2g`` / ``async_gpu`` /
  ``async_cpu_to_gpu``, matched by ``id``) joins the runtime call enclosing its start to the
  device task enclosing its end; without flows, ``args.correlation`` does. A linked task's
  ``launch_ns`` is the start of its launch call (at most its own start), ``host_op_id`` the
  launch's parent op, ``name`` / ``input_shapes`` / ``input_dtypes`` that op's (``op_type``
  keeps the kernel's name); an unlinked task keeps its kernel name and launches at its start.
* **steps**: ``ProfilerStep#N`` annotations -> step ``N`` (source ``torch.profiler``). A host
  event's or memory event's step is the step whose range holds its start; a task's is its
  launch's (unlinked: the step whose range holds its start).
* **memory**: ``[memory]`` instant events of a device (``Device Type`` other than 0):
  ``Bytes`` > 0 -> ``malloc``, < 0 -> ``free``, ``size`` its magnitude, ``Total Allocated`` /
  ``Total Reserved`` after it, ``tag`` the op enclosing it. The memory table is device
  memory, so host (CPU allocator) events are left out: a CPU-only trace has no memory rows
  (``meta["host_memory_events"]`` counts them) and the memory rules say ``SKIPPED``. With
  several devices in one trace the one with most events is kept (a warning says so).
* **meta**: ``source_format`` ``kineto``, ``status`` ``complete``, ``device`` the GPU's name
  from ``deviceProperties`` (``cpu`` when no device task ran), ``rank`` / ``world_size`` from
  ``distributedInfo`` (0 / 1 without), ``host_time`` ``measured``, ``steps_from`` ``marks``,
  ``record_memory`` / ``record_shapes`` from the trace's ``profile_memory`` /
  ``record_shapes``, ``trace_file``.

A file that is not JSON, a truncated ``.gz`` or an object without ``traceEvents`` is one
:class:`~msprof_py.profile.loading.ProfileError` naming the file.
"""

from __future__ import annotations

import bisect
import gzip
import json
import re
import zlib
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from msprof_py.importers import Importer, build_profile, register
from msprof_py.importers.nesting import enclosing
from msprof_py.profile.loading import Profile, ProfileError
from msprof_py.profile.schema import NO_ID

NAME = "kineto"
SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz")
STEP_SOURCE = "torch.profiler"
#: how many leading bytes ``detect`` reads of a ``.json`` file not named ``*.pt.trace.json``
SNIFF_BYTES = 65536

OP_CATS = frozenset({"cpu_op", "operator"})
ANNOTATION_CATS = frozenset({"user_annotation"})
PYTHON_CATS = frozenset({"python_function"})
RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "runtime"})
DEVICE_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
FLOW_CATS = frozenset({"ac2g", "async_gpu", "async_cpu_to_gpu"})
STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
#: runtime calls that submit device work (a launch even when the trace lacks the task)
LAUNCH_NAME = re.compile(r"launch|memcpy|memset", re.IGNORECASE)
SYNC_NAME = re.compile(r"synchronize", re.IGNORECASE)
#: synchronous copies (not ``...Async``): the call returns when the copy is done
BLOCKING_COPY_NAME = re.compile(r"^(?:cudaMemcpy|cuMemcpy)(?!.*Async)")
#: kernels of the matrix engine (tensor cores): the analysers' cube
MATRIX_NAME = re.compile(r"gemm|conv|cutlass|xmma|wgmma|mma|cublas|cudnn|flash|attention", re.I)
COLLECTIVES = (
    ("allreduce", "allreduce"),
    ("allgather", "allgather"),
    ("reducescatter", "reducescatter"),
    ("broadcast", "broadcast"),
    ("alltoall", "alltoall"),
    ("sendrecv", "sendrecv"),
    ("send", "sendrecv"),
    ("recv", "sendrecv"),
    ("reduce", "reduce"),
)
ALGORITHMS = ("ring", "tree", "nvls", "collnet")
COPY_KINDS = {
    "htod": ("HOST_TO_DEVICE", "MEMCPY_H2D"),
    "dtoh": ("DEVICE_TO_HOST", "MEMCPY_D2H"),
    "dtod": ("DEVICE_TO_DEVICE", "MEMCPY_D2D"),
}
#: Kineto's ``Input type`` (C++ scalar type names) -> torch dtype names
DTYPES = {
    "float": "float32",
    "double": "float64",
    "c10::Half": "float16",
    "c10::BFloat16": "bfloat16",
    "long int": "int64",
    "long": "int64",
    "int": "int32",
    "short int": "int16",
    "short": "int16",
    "signed char": "int8",
    "unsigned char": "uint8",
    "bool": "bool",
    "c10::complex<float>": "complex64",
    "c10::complex<double>": "complex128",
    "c10::Float8_e4m3fn": "float8_e4m3fn",
    "c10::Float8_e5m2": "float8_e5m2",
}
#: bytes per element of the ``dtype`` arg of PyTorch's collective records (``Float`` ...)
COMM_ITEMSIZE = {
    "float": 4,
    "half": 2,
    "bfloat16": 2,
    "double": 8,
    "long": 8,
    "int": 4,
    "short": 2,
    "byte": 1,
    "char": 1,
    "bool": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}


# ---- finding and reading the traces -------------------------------------------------------


def _is_trace_name(path: Path) -> bool:
    return path.name.endswith(SUFFIXES)


def _sniff(path: Path) -> bool:
    """Whether a ``.json``/``.json.gz`` file begins like a Kineto trace (its header keys)."""
    try:
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rb") as f:
            head = f.read(SNIFF_BYTES)
    except (OSError, EOFError, zlib.error):
        return False
    return b'"schemaVersion"' in head and b'"deviceProperties"' in head


def trace_files(path: Path) -> list[Path]:
    """The Kineto traces ``path`` names: itself, else the ``*.pt.trace.json[.gz]`` files in
    the folder, else those one level down."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        return []
    for pattern in ("*", "*/*"):
        found = sorted(p for p in path.glob(pattern) if p.is_file() and _is_trace_name(p))
        if found:
            return found
    return []


def detect(path: Path) -> bool:
    """``path`` is a ``*.pt.trace.json[.gz]`` file, a ``.json[.gz]`` file that starts as
    Kineto's do, or a folder holding ``*.pt.trace.json[.gz]`` files (or one level down)."""
    if path.is_file():
        if _is_trace_name(path):
            return True
        return path.name.endswith((".json", ".json.gz")) and _sniff(path)
    return bool(trace_files(path))


def read_trace(file: Path) -> dict[str, Any]:
    """The trace object of ``file``; a :class:`ProfileError` naming it when it is not one."""
    what = "a PyTorch profiler trace"
    try:
        if file.name.endswith(".gz"):
            with gzip.open(file, "rb") as f:
                raw = f.read()
        else:
            raw = file.read_bytes()
        doc = json.loads(raw)
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise ProfileError(f"{file}: not {what} (damaged or truncated gzip: {exc})") from None
    except OSError as exc:
        raise ProfileError(f"{file}: cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ProfileError(f"{file}: not {what} (not UTF-8 text)") from None
    except json.JSONDecodeError as exc:
        raise ProfileError(
            f"{file}: not {what} (invalid JSON at line {exc.lineno} column {exc.colno}: "
            f"{exc.msg}; truncated?)"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise ProfileError(f"{file}: not {what} ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        got = "an object without a traceEvents list" if isinstance(doc, dict) else "no object"
        raise ProfileError(f"{file}: not {what} (holds {got})")
    return doc


# ---- small conversions ----------------------------------------------------------------------


def _num(value: Any) -> float | None:
    """``value`` as a finite float, or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        out = float(value)
    except ValueError:
        return None
    return out if out == out and abs(out) != float("inf") else None


def _int(value: Any, default: int) -> int:
    got = _num(value)
    return int(got) if got is not None else default


def _ns(us: float) -> int:
    return round(us * 1000.0)


def _tensor_inputs(dims: list, types: Any) -> list[int]:
    """Indices of the inputs that are tensors or tensor lists: what msprof-py's recorder
    lists. Kineto gives every argument an entry (``Scalar``, ``ScalarList``, ``""`` for None,
    ...); with no ``Input type`` every entry counts."""
    if not isinstance(types, list):
        return list(range(len(dims)))
    kept = []
    for i, d in enumerate(dims):
        t = types[i] if i < len(types) else None
        nested = isinstance(d, list) and bool(d) and all(isinstance(x, list) for x in d)
        if nested or (t is not None and str(t) in DTYPES):
            kept.append(i)
    return kept


def shapes_text(dims: Any, types: Any = None) -> str:
    """Kineto's ``Input Dims`` (``[[5, 8], [16], []]``) as ``"5,8;16;"``: one entry per
    tensor input (a 0-d tensor's entry is empty), the tensors of a tensor list one entry each;
    with ``Input type`` given, non-tensor arguments (``Scalar`` ...) are left out, as
    msprof-py's recorder leaves them out."""
    if not isinstance(dims, list):
        return ""
    entries: list[str] = []
    for i in _tensor_inputs(dims, types):
        d = dims[i]
        if isinstance(d, list) and d and all(isinstance(x, list) for x in d):
            entries += [",".join(str(_int(x, 0)) for x in inner) for inner in d]
        elif isinstance(d, list):
            entries.append(",".join(str(_int(x, 0)) for x in d if not isinstance(x, list)))
        else:
            entries.append("")
    return ";".join(entries)


def dtypes_text(types: Any, dims: Any) -> str:
    """Kineto's ``Input type`` as ``";"``-separated torch dtype names, aligned with
    :func:`shapes_text` (a tensor list's type repeated for each of its tensors)."""
    if not isinstance(types, list):
        return ""
    entries: list[str] = []
    dims = dims if isinstance(dims, list) else [None] * len(types)
    for i in _tensor_inputs(dims, types):
        t = types[i] if i < len(types) else None
        name = DTYPES.get(str(t), str(t)) if t is not None else ""
        d = dims[i]
        if isinstance(d, list) and d and all(isinstance(x, list) for x in d):
            entries += [name] * len(d)
        else:
            entries.append(name)
    return ";".join(entries)


def copy_kind(name: str) -> tuple[str, str, bool]:
    """``(copy_kind, op_type, pinned)`` of a ``Memcpy HtoD (Pinned -> Device)`` event."""
    low = name.lower()
    for key, (kind, op_type) in COPY_KINDS.items():
        if key in low:
            return kind, op_type, "pinned" in low or key == "dtod"
    return "", "MEMCPY", "pinned" in low


def collective_of(name: str, arg: Any = None) -> tuple[str, str]:
    """``(collective, algorithm)`` of an NCCL kernel (its ``Collective name`` arg first)."""
    algorithm = next((a for a in ALGORITHMS if f"_{a}" in name.lower()), "")
    for text in (str(arg or ""), name):
        flat = text.lower().replace("_", "")
        for key, collective in COLLECTIVES:
            if key in flat:
                return collective, algorithm
    return "", algorithm


def message_bytes(args: dict[str, Any]) -> int:
    """Bytes of a collective's input message from PyTorch's ``record_param_comms`` args
    (``In msg nelems`` x the size of ``dtype``), 0 when not recorded."""
    nelems = _int(args.get("In msg nelems"), 0)
    size = COMM_ITEMSIZE.get(str(args.get("dtype", "")).lower(), 0)
    return max(0, nelems * size)


def kernel_type(name: str) -> str:
    """The task_type of a CUDA kernel (see the module docs)."""
    return "AI_CORE" if MATRIX_NAME.search(name) else "AI_VECTOR_CORE"


class Spans:
    """Properly nested spans of one thread: the innermost one holding an instant."""

    def __init__(self, starts: list[int], ends: list[int], ids: list[int]) -> None:
        order = sorted(range(len(starts)), key=lambda i: (starts[i], -ends[i]))
        self.starts = [starts[i] for i in order]
        self.ends = [ends[i] for i in order]
        self.ids = [ids[i] for i in order]
        self.parent = [-1] * len(order)
        stack: list[int] = []
        for j in range(len(order)):
            s, e = self.starts[j], self.ends[j]
            while stack and (self.ends[stack[-1]] <= s and self.starts[stack[-1]] < s):
                stack.pop()
            while stack and self.ends[stack[-1]] < e:
                stack.pop()
            self.parent[j] = stack[-1] if stack else -1
            stack.append(j)

    def holding(self, t: int) -> int:
        """The id of the innermost span with ``start <= t <= end``, or -1."""
        j = bisect.bisect_right(self.starts, t) - 1
        while j >= 0 and self.ends[j] < t:
            j = self.parent[j]
        return self.ids[j] if j >= 0 else NO_ID


class StepRanges:
    """The steps' host ranges: which step holds an instant."""

    def __init__(self, steps: list[tuple[int, int, int]]) -> None:
        self.steps = sorted(steps, key=lambda s: s[1])
        self.starts = [s[1] for s in self.steps]

    def at(self, t: int) -> int:
        j = bisect.bisect_right(self.starts, t) - 1
        if j >= 0 and t < self.steps[j][2]:
            return self.steps[j][0]
        return -1


# ---- one trace ------------------------------------------------------------------------------


@dataclass
class _Rank:
    """One trace converted: meta, frames, warnings."""

    meta: dict[str, Any]
    tables: dict[str, pd.DataFrame]
    warnings: list[str] = field(default_factory=list)


def _events(doc: dict[str, Any]) -> Iterable[dict[str, Any]]:
    return (e for e in doc["traceEvents"] if isinstance(e, dict))


def earliest_ns(doc: dict[str, Any]) -> int | None:
    """The earliest ``ts`` of the trace's timed events, in ns (None: none has one)."""
    found = [
        ts for e in _events(doc) if e.get("ph") != "M" and (ts := _num(e.get("ts"))) is not None
    ]
    return _ns(min(found)) if found else None


def _tid(value: Any) -> int:
    return _int(value, 0)


def _key(e: dict[str, Any]) -> tuple[str, str]:
    return str(e.get("pid")), str(e.get("tid"))


def convert(doc: dict[str, Any], file: Path, origin: int) -> _Rank:
    """The tables and meta of one trace, times in ns since ``origin``."""
    notes: list[str] = []
    bad = 0
    host: list[dict[str, Any]] = []
    device: list[dict[str, Any]] = []
    memory: list[dict[str, Any]] = []
    flows: dict[Any, dict[str, tuple[tuple[str, str], int]]] = defaultdict(dict)
    steps: dict[int, tuple[int, int, int]] = {}
    host_memory = 0
    for e in _events(doc):
        ph, cat, name = e.get("ph"), str(e.get("cat", "")), str(e.get("name", ""))
        if ph not in ("X", "i", "I", "s", "f", "t"):
            continue
        ts = _num(e.get("ts"))
        if ts is None:
            bad += 1
            continue
        start = _ns(ts) - origin
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        if ph in ("s", "f", "t"):
            if cat in FLOW_CATS and "id" in e:
                flows[e["id"]]["s" if ph == "s" else "f"] = (_key(e), start)
            continue
        if ph in ("i", "I"):
            if name == "[memory]":
                dtype_ = _int(args.get("Device Type"), 0)
                if dtype_ == 0:
                    host_memory += 1
                    continue
                nbytes = _int(args.get("Bytes"), 0)
                memory.append(
                    {
                        "time_ns": start,
                        "action": "malloc" if nbytes >= 0 else "free",
                        "address": _int(args.get("Addr"), 0),
                        "size": abs(nbytes),
                        "allocated": _int(args.get("Total Allocated"), 0),
                        "reserved": _int(args.get("Total Reserved"), 0),
                        "device": _int(args.get("Device Id"), 0),
                        "key": _key(e),
                    }
                )
            continue
        end = start + max(0, _ns(_num(e.get("dur")) or 0.0))
        if cat in DEVICE_CATS:
            device.append({"e": e, "kind": DEVICE_CATS[cat], "start": start, "end": end})
            continue
        if cat in OP_CATS:
            kind = "op"
        elif cat in ANNOTATION_CATS:
            kind = "annotation"
            m = STEP_NAME.match(name)
            if m and int(m.group(1)) not in steps:
                steps[int(m.group(1))] = (int(m.group(1)), start, end)
        elif cat in PYTHON_CATS:
            kind = "python"
        elif cat in RUNTIME_CATS:
            kind = "api"
        else:
            continue
        row = {
            "event_id": len(host),  # numbered again in time order below
            "kind": kind,
            "name": name,
            "start_ns": start,
            "end_ns": end,
            "thread": _tid(e.get("tid")),
            "stream_id": -1,
            "task_id": NO_ID,
            "parent_id": NO_ID,
            "key": _key(e),
            "correlation": args.get("correlation"),
            "runtime": cat in RUNTIME_CATS,
        }
        if kind == "op":
            dims = args.get("Input Dims")
            row["input_shapes"] = shapes_text(dims, args.get("Input type"))
            row["input_dtypes"] = dtypes_text(args.get("Input type"), dims)
            row["sequence"] = _int(args.get("Sequence number"), NO_ID)
            row["comm_bytes"] = message_bytes(args)
        host.append(row)
    if bad:
        notes.append(f"{file}: {bad} events without a numeric ts were skipped")
    host.sort(key=lambda r: (r["start_ns"], -r["end_ns"], r["event_id"]))
    for i, r in enumerate(host):
        r["event_id"] = i
    runtime = [i for i, r in enumerate(host) if r["runtime"]]

    # spans per thread: ops (parents of launches, tags of memory), runtime calls (launches)
    def spans(rows: Iterable[dict[str, Any]]) -> dict[tuple[str, str], Spans]:
        by: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        for r in rows:
            by[r["key"]].append(r)
        return {
            k: Spans(
                [r["start_ns"] for r in v], [r["end_ns"] for r in v], [r["event_id"] for r in v]
            )
            for k, v in by.items()
        }

    op_rows = [r for r in host if r["kind"] == "op"]
    op_spans = spans(op_rows)
    _nest_ops(op_rows)
    call_spans = spans(host[i] for i in runtime)
    dev_spans: dict[tuple[str, str], Spans] = {}
    by_dev: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, d in enumerate(device):
        by_dev[_key(d["e"])].append(i)
    for k, idx in by_dev.items():
        dev_spans[k] = Spans(
            [device[i]["start"] for i in idx], [device[i]["end"] for i in idx], idx
        )

    # links: flows first, correlation ids for the tasks no flow reached
    launch_of: dict[int, int] = {}
    for ends in flows.values():
        if "s" not in ends or "f" not in ends:
            continue
        (skey, sts), (fkey, fts) = ends["s"], ends["f"]
        call = call_spans[skey].holding(sts) if skey in call_spans else NO_ID
        task = dev_spans[fkey].holding(fts) if fkey in dev_spans else NO_ID
        if call != NO_ID and task != NO_ID:
            launch_of.setdefault(task, call)
    by_corr = {
        str(host[i]["correlation"]): i for i in runtime if host[i]["correlation"] is not None
    }
    for i, d in enumerate(device):
        corr = (
            d["e"].get("args", {}).get("correlation")
            if isinstance(d["e"].get("args"), dict)
            else None
        )
        if i not in launch_of and corr is not None and str(corr) in by_corr:
            launch_of[i] = by_corr[str(corr)]

    ranges = StepRanges(list(steps.values()))
    for r in host:
        r["step"] = ranges.at(r["start_ns"])
    for i in runtime:
        r = host[i]
        if SYNC_NAME.search(r["name"]):
            r["kind"] = "sync"
        elif LAUNCH_NAME.search(r["name"]):
            r["kind"] = "launch"
    for call in launch_of.values():
        host[call]["kind"] = "launch"
    for i in runtime:  # a synchronous copy returns when its copy is done: the host waited
        if BLOCKING_COPY_NAME.search(host[i]["name"]):
            host[i]["kind"] = "sync"
    for i in runtime:
        r = host[i]
        if r["kind"] in ("launch", "sync") and r["key"] in op_spans:
            r["parent_id"] = op_spans[r["key"]].holding(r["start_ns"])

    world = distributed(doc)[1]
    tasks = _tasks(device, launch_of, host, ranges, world)
    for t in tasks:
        call = t.pop("call")
        if call != NO_ID and host[call]["task_id"] == NO_ID:
            host[call]["task_id"] = t["task_id"]
            host[call]["stream_id"] = t["stream_id"]

    kept_device = None
    if memory:
        counts = Counter(m["device"] for m in memory)
        kept_device = counts.most_common(1)[0][0]
        if len(counts) > 1:
            notes.append(
                f"{file}: memory events of {len(counts)} devices; kept device {kept_device}'s "
                f"({counts[kept_device]} of {len(memory)})"
            )
        memory = sorted(
            (m for m in memory if m["device"] == kept_device), key=lambda m: m["time_ns"]
        )
        for m in memory:
            op = op_spans[m["key"]].holding(m["time_ns"]) if m["key"] in op_spans else NO_ID
            m["tag"] = host[op]["name"] if op != NO_ID else ""
            m["step"] = ranges.at(m["time_ns"])
    meta = _meta(doc, file, device, kept_device, host_memory)
    frame = pd.DataFrame
    tables = {
        "tasks": frame(tasks),
        "host_events": frame(host).drop(
            columns=["key", "correlation", "runtime", "comm_bytes"], errors="ignore"
        ),
        "memory": frame(memory).drop(columns=["key", "device"], errors="ignore"),
        "steps": frame(
            [
                {"step": n, "start_ns": s, "end_ns": e, "source": STEP_SOURCE, "optimizer_id": -1}
                for n, s, e in sorted(steps.values())
            ]
        ),
    }
    return _Rank(meta, tables, notes)


def _nest_ops(ops: list[dict[str, Any]]) -> None:
    """Set each op's ``parent_id`` to the op enclosing it on its thread (in place)."""
    if not ops:
        return
    threads: dict[tuple[str, str], int] = {}
    tids = np.array([threads.setdefault(r["key"], len(threads)) for r in ops], dtype=np.int64)
    starts = np.array([r["start_ns"] for r in ops], dtype=np.int64)
    ends = np.array([r["end_ns"] for r in ops], dtype=np.int64)
    for r, at in zip(ops, enclosing(tids, starts, ends).tolist(), strict=True):
        r["parent_id"] = ops[at]["event_id"] if at >= 0 else NO_ID


def _tasks(
    device: list[dict[str, Any]],
    launch_of: dict[int, int],
    host: list[dict[str, Any]],
    ranges: StepRanges,
    world: int,
) -> list[dict[str, Any]]:
    """The tasks rows, numbered in launch order, with their launches (``call``)."""
    rows: list[dict[str, Any]] = []
    for i, d in enumerate(device):
        e, kind, start, end = d["e"], d["kind"], d["start"], d["end"]
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        name = str(e.get("name", ""))
        call = launch_of.get(i, NO_ID)
        op = host[call]["parent_id"] if call != NO_ID else NO_ID
        row: dict[str, Any] = {
            "stream_id": _int(args.get("stream"), _int(e.get("tid"), 0)),
            "kind": kind,
            "name": name,
            "op_type": name,
            "start_ns": start,
            "end_ns": end,
            "launch_ns": min(host[call]["start_ns"], start) if call != NO_ID else start,
            "bytes": _int(args.get("bytes"), 0),
            "host_op_id": op,
            "call": call,
        }
        if kind == "kernel":
            grid = args.get("grid")
            blocks = 1
            if isinstance(grid, list) and grid:
                for g in grid:
                    blocks *= max(1, _int(g, 1))
            row["block_dim"] = min(blocks, 2**31 - 1)
            if "nccl" in name.lower():
                coll, algo = collective_of(name, args.get("Collective name"))
                row |= {"kind": "collective", "task_type": "HCCL", "collective": coll}
                row |= {"algorithm": algo, "world_size": _int(args.get("Group size"), world)}
                if not row["bytes"]:
                    parent = host[op].get("comm_bytes", 0) if op != NO_ID else 0
                    row["bytes"] = message_bytes(args) or parent
            else:
                row["task_type"] = kernel_type(name)
        elif kind == "memcpy":
            ck, op_type, pinned = copy_kind(name)
            row |= {"task_type": "DMA", "copy_kind": ck, "op_type": op_type, "pinned": pinned}
        else:
            row |= {"task_type": "DMA", "op_type": "MEMSET"}
        if op != NO_ID:
            parent = host[op]
            row |= {"name": parent["name"], "input_shapes": parent.get("input_shapes", "")}
            row["input_dtypes"] = parent.get("input_dtypes", "")
        row["step"] = host[call]["step"] if call != NO_ID else ranges.at(start)
        rows.append(row)
    rows.sort(key=lambda r: (r["launch_ns"], r["start_ns"], r["stream_id"]))
    last_end: dict[int, int] = {}
    for n, r in enumerate(rows):
        r["task_id"] = n
    for r in sorted(rows, key=lambda r: (r["stream_id"], r["start_ns"], r["task_id"])):
        prev = last_end.get(r["stream_id"])
        r["wait_ns"] = max(0, r["start_ns"] - prev) if prev is not None else 0
        last_end[r["stream_id"]] = max(prev or r["end_ns"], r["end_ns"])
    return rows


def distributed(doc: dict[str, Any]) -> tuple[int | None, int]:
    """``(rank or None, world_size)`` from ``distributedInfo``."""
    info = doc.get("distributedInfo")
    if not isinstance(info, dict):
        return None, 1
    rank = _num(info.get("rank"))
    return (int(rank) if rank is not None else None), max(1, _int(info.get("world_size"), 1))


def _meta(
    doc: dict[str, Any],
    file: Path,
    device: list[dict[str, Any]],
    memory_device: int | None,
    host_memory: int,
) -> dict[str, Any]:
    rank, world = distributed(doc)
    props = [p for p in doc.get("deviceProperties") or [] if isinstance(p, dict)]
    name = "cpu"
    if device:
        used = Counter(_int(d["e"].get("pid"), 0) for d in device).most_common(1)[0][0]
        found = [p for p in props if _int(p.get("id"), -1) == used] or props
        name = str(found[0].get("name", "gpu")) if found else "gpu"
    meta: dict[str, Any] = {
        "source_format": NAME,
        "status": "complete",
        "device": name,
        "rank": rank if rank is not None else 0,
        "world_size": world,
        "host_time": "measured",
        "steps_from": "marks",
        "trace_file": str(file),
        "host_memory_events": host_memory,
    }
    if "profile_memory" in doc:
        meta["record_memory"] = bool(doc.get("profile_memory"))
    if "record_shapes" in doc:
        meta["record_shapes"] = bool(doc.get("record_shapes"))
    if memory_device is not None:
        meta["memory_device"] = memory_device
    return meta


# ---- the importer ---------------------------------------------------------------------------


def load(path: Path) -> Profile:
    """The Profile of the Kineto trace(s) at ``path`` (see the module docs)."""
    files = trace_files(path)
    if not files:
        raise ProfileError(f"{path}: no PyTorch profiler trace (*.pt.trace.json[.gz]) here")
    docs = [(f, read_trace(f)) for f in files]
    if len(docs) > 1:
        ranks = [distributed(doc)[0] for _, doc in docs]
        if None in ranks or len(set(ranks)) != len(ranks):
            names = ", ".join(f.name for f in files)
            raise ProfileError(
                f"{path}: {len(files)} PyTorch profiler traces ({names}) but not one per rank "
                "(their distributedInfo.rank are missing or repeat): pass one of the files"
            )
    origins = [o for _, doc in docs if (o := earliest_ns(doc)) is not None]
    origin = min(origins) if origins else 0
    ranks_out: dict[int, tuple[dict[str, Any], dict[str, pd.DataFrame]]] = {}
    notes: list[str] = []
    for file, doc in docs:
        one = convert(doc, file, origin)
        ranks_out[int(one.meta["rank"])] = (one.meta, one.tables)
        notes += one.warnings
    return build_profile(path, ranks_out, notes)


register(Importer(NAME, detect, load, "*.pt.trace.json[.gz] and */*.pt.trace.json[.gz]"))
