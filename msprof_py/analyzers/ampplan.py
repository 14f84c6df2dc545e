"""What automatic mixed precision would do to a float32 step, re-costed with the device model.

The recorded op stream of each analysed step is walked as autocast would run it
(``rules/amp_policy.yaml``: the adapter's autocast policy):

* **forward** (the step's main thread, before the backward pass): an op of the ``lower`` list
  runs in the low dtype, and each of its float32 inputs not produced by a low-precision op is
  cast down first (a weight, a bias, the batch, the output of a float32 op); an op of the
  ``fp32`` list runs in float32 and each low-precision input is cast up; any other op runs in
  its inputs' dtype (low when every floating input comes from a low-precision op). The
  producer of an input is the most recent of the last :data:`WINDOW` ops with an output of
  its shape.
* **backward** (the other threads, or ops named ``*_backward*``): cube kernels run in the low
  dtype; ``X_backward`` takes the dtype forward op ``X`` ran in; other ops follow their
  inputs. Every forward cast of a tensor that needs a gradient (all but the batch, which
  arrives by a host-to-device copy) has a backward cast of the same size (autograd's
  ``ToCopyBackward``).
* the rest (the optimizer step) is unchanged: it updates float32 master weights.

Re-cost: a MatMul kernel with the device cost model's ``matmul_cost`` in the low dtype (the
ratio to its float32 cost applied to the recorded time), any other cube kernel with the cube
term scaled by the float32/float16 peak ratio and the memory term halved; a vector or
TransData kernel that would run in the low dtype with its vector and memory terms halved; a
cast as ``vector_cost`` over its elements (4 + 2 bytes each) and one more host op to dispatch.
Host and device run side by side (the task queue lets the host run ahead): the step change is
that of the longer of the host's busy time and the device's critical time.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
import pandas as pd

from msprof_py.analyzers import intervals, shapes, timeline
from msprof_py.analyzers.context import CUBE_TYPES, KERNEL, RankData
from msprof_py.analyzers.findings import read_rules_file
from msprof_py.analyzers.patterns import OPTIMIZER_ANNOTATION
from msprof_py.device import costmodel

#: producers looked at for an input (the last ops with an output)
WINDOW = 8
LOW = frozenset({"float16", "bfloat16"})
FLOATING = LOW | {"float32"}
MATMUL_BASES = frozenset({"mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear"})
_EPILOGUE = frozenset({"addmm", "baddbmm", "addbmm"})


@cache
def policy() -> dict[str, Any]:
    """``rules/amp_policy.yaml`` as sets: ``lower``, ``fp32`` and the ``recorded`` overrides."""
    raw = read_rules_file("amp_policy.yaml")
    return {
        "lower": frozenset(raw["lower"]),
        "fp32": frozenset(raw["fp32"]),
        "recorded": dict(raw.get("recorded") or {}),
    }


def op_policy(name: str) -> str:
    """``lower``, ``fp32`` or ``follow``: what autocast does with the recorded op ``name``."""
    base = name.split("::")[-1]
    base = base[:-1] if base.endswith("_") and not base.endswith("__") else base
    p = policy()
    if base in p["recorded"]:
        return p["recorded"][base]
    for candidate in (base, base.removesuffix("_forward")):
        if candidate in p["lower"]:
            return "lower"
        if candidate in p["fp32"]:
            return "fp32"
    return "follow"


def forward_base(name: str) -> str | None:
    """``aten::gelu_backward`` -> ``gelu``; ``_log_softmax_backward_data`` -> ``_log_softmax``;
    None for an op that is not a backward op."""
    base = name.split("::")[-1]
    if "_backward" not in base:
        return None
    return base.split("_backward")[0]


@dataclass
class Plan:
    """The re-costed step (all figures are totals over the analysed steps, in ns)."""

    dtype: str
    #: the changed kernels: task index, step, name, recorded_ns, amp_ns, role (cube / vector)
    kernels: pd.DataFrame
    #: the casts AMP adds: step, module, elements, direction (down / up), backward, ns
    casts: pd.DataFrame
    host_per_op_ns: float
    #: mean per step: host busy, device critical and step time (:func:`busy_per_step`)
    host_ns: float
    device_ns: float
    step_ns: float
    n_steps: int

    @property
    def device_delta_ns(self) -> float:
        """Device time AMP adds per step (negative: it saves)."""
        k = self.kernels
        changed = float((k["amp_ns"] - k["recorded_ns"]).sum()) if len(k) else 0.0
        return (changed + float(self.casts["ns"].sum())) / self.n_steps

    @property
    def host_delta_ns(self) -> float:
        """Host dispatch AMP adds per step (one op per cast)."""
        return len(self.casts) / self.n_steps * self.host_per_op_ns

    @property
    def step_delta_ns(self) -> float:
        """Modelled change of the step time (negative: AMP makes the step faster)."""
        return step_change(self.host_ns, self.device_ns, self.host_delta_ns, self.device_delta_ns)

    def per_step(self, frame: pd.DataFrame, column: str) -> float:
        """Sum of ``column`` of ``frame`` per step."""
        return float(frame[column].sum()) / self.n_steps if len(frame) else 0.0


def step_change(host: float, device: float, dh: float, dd: float) -> float:
    """Step time change when the host's busy time changes by ``dh`` and the device's critical
    time by ``dd``: host and device run side by side (the task queue lets the host run ahead),
    so the longer of the two sets the step."""
    return max(host + dh, device + dd) - max(host, device)


def busy_per_step(data: RankData) -> tuple[float, float, float]:
    """Mean host busy time (the step's host range less the time the host blocked in syncs),
    the device's critical time (the step less the device idle the host caused: dispatch, other
    host work, data loading) and the step time, in ns. The host range, not the device window:
    how much device work the previous step left queued moves the window's start and the
    first sync's length, not the host's work."""
    steps = timeline.step_breakdown(data)
    n = data.n_steps
    step = float(steps["step_ns"].sum()) / n
    syncs = data.host[data.host["kind"] == "sync"]
    host_range = float(data.steps["host_ns"].sum()) / n if len(data.steps) else step
    host = host_range - float((syncs["end_ns"] - syncs["start_ns"]).sum()) / n
    host_idle = sum(
        float(steps[c].sum())
        for c in ("idle_dispatch_ns", "idle_other_ns", "idle_data_loading_ns")
        if c in steps
    )
    return host, step - host_idle / n, step


def low_dtype(data: RankData) -> str:
    """bfloat16 where the cube multiplies it (no loss scaling needed), else float16."""
    spec = data.spec
    return "bfloat16" if spec is not None and "bfloat16" in spec.cube.fractal else "float16"


def _parts(text: Any) -> list[str]:
    return str(text).split(";") if isinstance(text, str) and text else []


class _Producers:
    """The dtype (and whether it is the batch) of the last outputs, looked up by shape."""

    def __init__(self) -> None:
        self.recent: deque[tuple[tuple[str, ...], str, bool]] = deque(maxlen=WINDOW)

    def add(self, out_shapes: list[str], dtype: str, data: bool = False) -> None:
        self.recent.append((tuple(out_shapes), dtype, data))

    def find(self, shape: str) -> tuple[str, bool] | None:
        """The dtype and batch flag of the last floating output of ``shape``, if any."""
        for outs, dtype, data in reversed(self.recent):
            if shape in outs and dtype in FLOATING:
                return dtype, data
        return None


def _numel(shape: str) -> int:
    n = 1
    for d in shape.split(","):
        if d.strip().lstrip("-").isdigit():
            n *= max(0, int(d))
    return n


def _walk(ops: pd.DataFrame, low: str) -> tuple[dict[int, str], list[dict[str, Any]]]:
    """One step's ops -> the dtype each op's kernels would run in (only changed ones) and the
    casts autocast adds."""
    vdtype: dict[int, str] = {}
    casts: list[dict[str, Any]] = []
    with_module = ops[ops["module"].astype(str) != ""]
    main = with_module["thread"].iloc[0] if len(with_module) else ops["thread"].iloc[0]
    backward_at = len(ops)
    threads, names = ops["thread"].to_numpy(), ops["name"].astype(str).to_numpy()
    for i in range(len(ops)):
        if threads[i] != main or forward_base(names[i]) is not None:
            backward_at = i
            break
    fwd_dtypes: dict[str, list[str]] = {}
    prod = _Producers()
    rows = ops.to_dict("records")
    for r in rows[:backward_at]:
        outs = _parts(r["out_shapes"])
        if r["h2d"]:  # copy_(dst, src): the batch arrives in dst's shape
            prod.add(_parts(r["input_shapes"])[:1], _parts(r["input_dtypes"])[0], data=True)
            continue
        pol = op_policy(r["name"])
        in_shapes, in_dtypes = _parts(r["input_shapes"]), _parts(r["input_dtypes"])
        floating = [
            (s, d)
            for s, d in zip(in_shapes, in_dtypes, strict=False)
            if s and d in ("float32", *LOW)
        ]
        base = str(r["name"]).split("::")[-1]
        if pol == "lower":
            for s, d in floating:
                found = prod.find(s)
                if d == "float32" and not (found and found[0] in LOW):
                    grad = not (found and found[1])
                    casts.append(_cast(r, s, "down", grad))
            out = low
        elif pol == "fp32":
            for s, _ in floating:
                found = prod.find(s)
                if found and found[0] in LOW:
                    casts.append(_cast(r, s, "up", not found[1]))
            out = "float32"
        else:
            srcs = [prod.find(s) for s, _ in floating]
            out = low if srcs and all(f and f[0] in LOW for f in srcs) else "float32"
        fwd_dtypes.setdefault(base, []).append(out)
        if out != "float32":
            vdtype[r["event_id"]] = out
        prod.add(outs, out)
    back = _Producers()
    for r in rows[backward_at:]:
        if r["optimizer"] or r["h2d"]:
            continue
        fb = forward_base(r["name"])
        seen = (fwd_dtypes.get(fb) or fwd_dtypes.get(fb.lstrip("_"))) if fb else None
        if r["cube"]:
            out = low
        elif seen:  # the k-th last forward op of that name: its dtype, backward in reverse
            out = seen.pop() if len(seen) > 1 else seen[0]
        else:
            floating = [
                s
                for s, d in zip(_parts(r["input_shapes"]), _parts(r["input_dtypes"]), strict=False)
                if s and d in ("float32", *LOW)
            ]
            srcs = [back.find(s) for s in floating]
            out = low if srcs and all(f and f[0] in LOW for f in srcs) else "float32"
        if out != "float32":
            vdtype[r["event_id"]] = out
        back.add(_parts(r["out_shapes"]), out)
    mirrored = [{**c, "backward": True, "direction": _flip(c["direction"])} for c in casts]
    return vdtype, casts + [c for c in mirrored if c.pop("grad")]


def _flip(direction: str) -> str:
    return "up" if direction == "down" else "down"


def _cast(r: dict[str, Any], shape: str, direction: str, grad: bool) -> dict[str, Any]:
    return {
        "step": r["step"],
        "module": r["module"],
        "op": r["name"],
        "elements": _numel(shape),
        "direction": direction,
        "backward": False,
        "grad": grad,
    }


def _op_rows(data: RankData) -> pd.DataFrame:
    """Host ops that launched device work, in stream order, with their outputs and flags."""
    tasks = data.tasks
    mask = (tasks["host_op_id"] >= 0) & tasks["kind"].isin((KERNEL, "memcpy"))
    work = tasks.loc[mask, ["host_op_id", "kind", "task_type", "copy_kind", "output_shapes"]]
    last = work.drop_duplicates("host_op_id", keep="last").set_index("host_op_id")
    cube_ops = set(work.loc[work["task_type"].isin(CUBE_TYPES), "host_op_id"])
    h2d = set(work.loc[work["copy_kind"].astype(str) == "HOST_TO_DEVICE", "host_op_id"])
    cols = ["event_id", "name", "module", "thread", "step", "start_ns", "input_shapes"]
    ops = data.host_ops
    ops = ops.loc[ops["event_id"].isin(last.index), [*cols, "input_dtypes"]]
    ops = ops.sort_values(["step", "start_ns", "event_id"], kind="stable").reset_index(drop=True)
    ids = ops["event_id"].to_numpy()
    out_shapes = last["output_shapes"].reindex(ids).astype(object).fillna("").to_numpy()
    return ops.assign(
        out_shapes=out_shapes,
        cube=np.isin(ids, list(cube_ops)),
        h2d=np.isin(ids, list(h2d)),
        optimizer=in_optimizer(data, ops),
        module=ops["module"].astype(object).fillna("").astype(str),
    )


def in_optimizer(data: RankData, ops: pd.DataFrame) -> np.ndarray:
    """True for ops inside an ``Optimizer.step`` annotation."""
    host = data.all_host
    ann = host[host["kind"] == "annotation"]
    opt = ann[ann["name"].astype(str).str.match(OPTIMIZER_ANNOTATION).fillna(False).to_numpy(bool)]
    cover = intervals.Coverage(opt["start_ns"].to_numpy(), opt["end_ns"].to_numpy())
    return cover.contains(ops["start_ns"].to_numpy())


def _recost_kernels(data: RankData, vdtype: dict[int, str], low: str) -> pd.DataFrame:
    """The analysed float32 kernels of the ops in ``vdtype``, re-costed in the low dtype."""
    spec = data.spec
    tasks = data.tasks
    k = tasks[
        (tasks["kind"] == KERNEL)
        & tasks["host_op_id"].isin(list(vdtype))
        & (shapes.first_dtype(tasks["input_dtypes"]) == "float32")
        & (tasks["task_type"] != "AI_CPU")
    ]
    sched = spec.dispatch.device_sched_ns
    dur = k["duration_ns"].to_numpy(dtype=float)
    work = np.clip(dur - sched, 0, None)
    cube = k["task_type"].isin(CUBE_TYPES).to_numpy()
    ratio = np.where(
        cube,
        _cube_ratio(data, k, low),
        0.5,  # vector and TransData: half the bytes and half the vector repeats
    )
    amp_ns = sched + work * ratio
    return pd.DataFrame(
        {
            "task": k.index.to_numpy(),
            "step": k["step"].to_numpy(),
            "name": k["name"].astype(str).to_numpy(),
            "input_shapes": k["input_shapes"].astype(str).to_numpy(),
            "recorded_ns": dur,
            "amp_ns": amp_ns,
            "role": np.where(cube, "cube", "vector"),
        }
    )


def _cube_ratio(data: RankData, k: pd.DataFrame, low: str) -> np.ndarray:
    """Per cube kernel: low-dtype work time / float32 work time (the cost model's ratio)."""
    spec = data.spec
    p32 = spec.cube_peak_flops(costmodel.cube_dtype(spec, "float32"))
    p16 = spec.cube_peak_flops(low)
    out = np.empty(len(k))
    cube_ns = pd.to_numeric(k["cube_ns"], errors="coerce").fillna(0).to_numpy(dtype=float)
    mem_ns = pd.to_numeric(k["memory_ns"], errors="coerce").fillna(0).to_numpy(dtype=float)
    cache_: dict[tuple[str, str], float] = {}
    for i, (name, shp) in enumerate(zip(k["name"].astype(str), k["input_shapes"], strict=True)):
        key = (name, str(shp))
        if key not in cache_:
            cache_[key] = _matmul_ratio(spec, name, str(shp), low)
        ratio = cache_[key]
        if np.isnan(ratio):
            old = max(cube_ns[i], mem_ns[i])
            new = max(cube_ns[i] * p32 / p16, mem_ns[i] / 2)
            ratio = new / old if old > 0 else p32 / p16
        out[i] = ratio
    return out


def _matmul_ratio(spec: Any, name: str, shape_text: str, low: str) -> float:
    """matmul_cost(low) / matmul_cost(float32) work time of a MatMul kernel (NaN when its
    shapes do not say m, n, k)."""
    base = name.split("::")[-1]
    if base not in MATMUL_BASES:
        return float("nan")
    try:
        dims = [tuple(int(x) for x in s.split(",") if x) for s in shape_text.split(";")]
    except ValueError:
        return float("nan")
    a, b = (dims[1], dims[2]) if base in _EPILOGUE and len(dims) >= 3 else [*dims, (), ()][:2]
    if len(a) < 2 or len(b) < 2:
        return float("nan")
    m, k, n = a[-2], a[-1], b[-1]
    batch = int(np.prod(a[:-2])) if len(a) > 2 and base != "addbmm" else 1
    out_numel = batch * m * n
    numel = sum(int(np.prod(d)) if d else 1 for d in dims) + out_numel
    epilogue = out_numel if base in _EPILOGUE else 0
    costs = []
    for dtype, size in (("float32", 4), (low, 2)):
        c = costmodel.matmul_cost(
            spec, m, n, k, batch=batch, dtype=dtype, bytes_moved=numel * size,
            vector_elements=epilogue,
        )  # fmt: skip
        costs.append(c.duration_ns - c.sched_ns)
    return costs[1] / costs[0] if costs[0] > 0 else float("nan")


def _cast_ns(data: RankData, elements: np.ndarray, low: str) -> np.ndarray:
    table: dict[int, float] = {}
    out = np.empty(len(elements))
    for i, n in enumerate(elements):
        n = int(n)
        if n not in table:
            table[n] = costmodel.vector_cost(
                data.spec, elements=n, dtype=low, bytes_moved=n * 6
            ).duration_ns
        out[i] = table[n]
    return out


def host_per_op_ns(data: RankData) -> float:
    """Median host time of an op that launches one vector kernel (what a cast op costs)."""
    t = data.tasks
    vec = t[(t["kind"] == KERNEL) & (t["task_type"] == "AI_VECTOR_CORE")]
    single = vec["host_op_id"].value_counts()
    single = single[single == 1].index
    ops = data.host_ops
    ops = ops[ops["event_id"].isin(single)]
    if ops.empty:
        spec = data.spec
        return float(spec.dispatch.stage1_ns) if spec is not None else 0.0
    return float(np.median(ops["end_ns"] - ops["start_ns"]))


def plan(data: RankData) -> Plan | None:
    """The AMP re-cost of the analysed steps (None without a spec, host ops or float32 cube
    kernels)."""
    cached = data.cache.get("ampplan", False)
    if cached is not False:
        return cached
    result = data.cache["ampplan"] = _plan(data)
    return result


def _plan(data: RankData) -> Plan | None:
    spec = data.spec
    if spec is None or data.tasks.empty or not (data.host["kind"] == "op").any():
        return None
    low = low_dtype(data)
    ops = _op_rows(data)
    if ops.empty:
        return None
    vdtype: dict[int, str] = {}
    casts: list[dict[str, Any]] = []
    for _, step_ops in ops.groupby("step", sort=True):
        v, c = _walk(step_ops.reset_index(drop=True), low)
        vdtype.update(v)
        casts.extend(c)
    kernels = _recost_kernels(data, vdtype, low)
    if not (kernels["role"] == "cube").any():
        return None
    cast_frame = pd.DataFrame(
        casts, columns=["step", "module", "op", "elements", "direction", "backward"]
    )
    cast_frame["ns"] = _cast_ns(data, cast_frame["elements"].to_numpy(), low)
    host, device, step = busy_per_step(data)
    return Plan(
        dtype=low,
        kernels=kernels,
        casts=cast_frame,
        host_per_op_ns=host_per_op_ns(data),
        host_ns=host,
        device_ns=device,
        step_ns=step,
        n_steps=data.n_steps,
    )


#: the GradScaler's annotations (msprof_py.collectors.session records them)
SCALER_ANNOTATION = "GradScaler."


def scaler_ops(data: RankData) -> np.ndarray:
    """Event ids of the host ops the GradScaler ran itself: inside a ``GradScaler.*``
    annotation but not in the optimizer step it calls; without the annotations, ops named
    ``_amp_*`` and ops on float64 tensors (its inverse scale)."""
    ops = data.host_ops
    ann = data.all_host[data.all_host["kind"] == "annotation"]
    names = ann["name"].astype(str)
    scaler = ann[names.str.startswith(SCALER_ANNOTATION).to_numpy(bool)]
    start = ops["start_ns"].to_numpy()
    if len(scaler):
        inside = intervals.Coverage(
            scaler["start_ns"].to_numpy(), scaler["end_ns"].to_numpy()
        ).contains(start)
        mask = inside & ~in_optimizer(data, ops)
    else:
        mask = ops["name"].astype(str).str.contains("_amp_").to_numpy(bool) | shapes.has_dtype(
            ops["input_dtypes"], frozenset({"float64"})
        )
    return ops["event_id"].to_numpy()[mask]


def _idle_after(data: RankData, reads: pd.DataFrame) -> float:
    """Device idle time after each value read until the host's next sync: the host waited for
    the value, so the device's queue ran dry and refills only as fast as the host dispatches
    (the idle gaps, copies excepted, that start in that span)."""
    if reads.empty:
        return 0.0
    gaps = timeline.idle_gaps(data)
    gaps = gaps[gaps["cause"] != "copies"]
    syncs = np.sort(data.host.loc[data.host["kind"] == "sync", "start_ns"].to_numpy())
    total = 0.0
    for end in reads["end_ns"].to_numpy():
        nxt = syncs[np.searchsorted(syncs, end, side="right") :]
        until = nxt[0] if len(nxt) else np.iinfo(np.int64).max
        inside = (gaps["start_ns"] >= end) & (gaps["start_ns"] < until)
        total += float(gaps.loc[inside, "duration_ns"].sum())
    return total


def in_use(data: RankData) -> dict[str, Any] | None:
    """What mixed precision costs and saves in a recording that uses it (ns per step), or None
    when no cube kernel runs in a low dtype: ``casts`` (the Cast kernels between float32 and
    the low dtype), ``scaler`` (the GradScaler's kernels and their host time), ``saved`` (the
    low-precision cube and vector kernels re-costed in float32, less their recorded time)."""
    spec = data.spec
    t = data.tasks
    kern = t[t["kind"] == KERNEL]
    first = shapes.first_dtype(kern["input_dtypes"])
    cube = kern["task_type"].isin(CUBE_TYPES).to_numpy() & first.isin(LOW).to_numpy()
    if spec is None or not cube.any():
        return None
    n = data.n_steps
    low = str(first[cube].mode().iloc[0])
    ops = data.host_ops.set_index("event_id")
    op_dtypes = kern["host_op_id"].map(ops["input_dtypes"]).astype(object).fillna("")
    scaler = np.isin(kern["host_op_id"].to_numpy(), scaler_ops(data))
    is_cast = (kern["op_type"].astype(str) == "Cast").to_numpy()
    amp_cast = (
        is_cast
        & op_dtypes.str.contains("float32").to_numpy(bool)
        & op_dtypes.str.contains(low).to_numpy(bool)
        & ~scaler
    )
    sched = spec.dispatch.device_sched_ns
    c = kern[cube]
    work = np.clip(c["duration_ns"].to_numpy(dtype=float) - sched, 0, None)
    ratio = _cube_ratio(data, c, low)
    cube_saved = float((work / np.where(ratio > 0, ratio, 1) - work).sum())
    vec = kern[
        ~cube
        & ~is_cast
        & ~scaler
        & first.isin(LOW).to_numpy()
        & (kern["task_type"] != "AI_CPU").to_numpy()
    ]
    vector_saved = float(np.clip(vec["duration_ns"].to_numpy(dtype=float) - sched, 0, None).sum())
    per_op = host_per_op_ns(data)
    casts = kern[amp_cast]
    scaler_ids = scaler_ops(data)
    sc_ops = data.host_ops[data.host_ops["event_id"].isin(scaler_ids)]
    sc_kern = kern[scaler]
    sc_copies = t[(t["kind"] == "memcpy") & t["host_op_id"].isin(scaler_ids)]
    reads = sc_copies[sc_copies["copy_kind"].astype(str) == "DEVICE_TO_HOST"]
    return {
        "dtype": low,
        "n_steps": n,
        "casts": casts,
        "cast_ns": float(casts["duration_ns"].sum()) / n,
        "cast_host_ns": len(casts) / n * per_op,
        "scaler_found": bool(len(sc_ops)),
        "scaler_ns": (
            float(sc_kern["duration_ns"].sum() + sc_copies["duration_ns"].sum())
            + _idle_after(data, reads)
        )
        / n,
        "scaler_reads": len(reads) / n,
        "scaler_host_ns": float((sc_ops["end_ns"] - sc_ops["start_ns"]).sum()) / n,
        "scaler_kernels": len(sc_kern) / n,
        "saved_ns": (cube_saved + vector_saved) / n,
        "cube_saved_ns": cube_saved / n,
    }
