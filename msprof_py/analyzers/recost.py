"""What-if estimates: re-costing recorded tasks with a change applied (the device cost model).

* **Fusion** of a chain of ops (device facts section 6): one launch, one roofline over the
  union of the work: the cube time of the cube kernels (their recorded time less the per-task
  scheduling overhead), the vector time of the vector kernels at the full vector width (their
  FLOPs x element size / (bytes per cycle x cores x clock x efficiency), the cost model's
  vector term), and only the chain's external bytes as HBM traffic: every intermediate tensor
  (an op's output consumed inside the chain) is no longer written and read back, and copies
  inside the chain disappear.
* **Attention** (:func:`attention`): each attention found on the dataflow re-costed as the
  ``FlashAttentionScore`` kernel ``npu_fusion_attention`` launches for the same shapes and
  dtype (and ``FlashAttentionScoreGrad`` for its backward), with the cost function the shim
  itself uses (:func:`msprof_py.device.attention.flash_attention_cost`).
* **AMP** (fp32 -> fp16 on the cube): each fp32 cube kernel's compute term scaled by the
  fp32/fp16 peak ratio and its memory term halved (calibrated on the recorded duration), plus
  one Cast kernel (a vector kernel over its largest input) per kernel.
* **Copies** moved off the critical path and re-costed from pinned memory
  (``costmodel.copy_ns``).
* **AI CPU** dtype fallbacks re-costed as a vector kernel (``costmodel.vector_cost``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from msprof_py.analyzers import attention as attention_finder
from msprof_py.analyzers import shapes
from msprof_py.analyzers.context import CUBE_TYPES, KERNEL, VECTOR_TYPES, RankData
from msprof_py.analyzers.patterns import find, op_stream
from msprof_py.device import costmodel
from msprof_py.device.attention import STAT_WIDTH, drop_mask_cost, flash_attention_cost
from msprof_py.device.dtypes import ITEMSIZE, canonical
from msprof_py.device.records import CopyKind
from msprof_py.device.spec import DeviceSpec

FUSION_COLUMNS = [
    "match",
    "kernels",
    "device_ns",
    "fused_ns",
    "saved_ns",
    "host_ns",
    "host_saved_ns",
]


def vector_ns(spec: DeviceSpec, flops: np.ndarray, itemsize: np.ndarray) -> np.ndarray:
    """Vector-unit time of ``flops`` element-ops at the full vector width (the cost model's
    vector term with every vector core)."""
    v = spec.vector
    return flops * itemsize / v.bytes_per_cycle / v.cores / v.clock_hz / v.efficiency * 1e9


def memory_ns(spec: DeviceSpec, nbytes: np.ndarray, cores: np.ndarray) -> np.ndarray:
    """HBM time of ``nbytes`` for a kernel on ``cores`` cores (the cost model's memory term)."""
    per_core = spec.memory.gm_bytes_per_cycle_per_core * spec.cube.clock_hz
    bandwidth = np.minimum(spec.memory.effective_bandwidth, cores * per_core)
    return nbytes / bandwidth * 1e9


def op_costs(data: RankData, ops: np.ndarray | None = None) -> pd.DataFrame:
    """Per host op (indexed by event id; only the event ids ``ops``, when given): device time,
    cube work, vector work, bytes, output bytes, kernels, whether it ran on the cube."""
    spec = data.spec
    tasks = data.tasks
    cols = ["host_op_id", "kind", "task_type", "duration_ns", "flops", "bytes"]
    mask = (tasks["host_op_id"] >= 0) & tasks["kind"].isin((KERNEL, "memcpy"))
    if ops is not None:
        mask &= tasks["host_op_id"].isin(ops)
    t = tasks.loc[mask, [*cols, "output_shapes", "output_dtypes"]]
    sched = spec.dispatch.device_sched_ns if spec is not None else 0
    kernel = (t["kind"] == KERNEL).to_numpy()
    cube = t["task_type"].isin(CUBE_TYPES).to_numpy() & kernel
    vec = t["task_type"].isin(VECTOR_TYPES).to_numpy() & kernel
    dur = t["duration_ns"].to_numpy(dtype=float)
    item = shapes.itemsizes(t["output_dtypes"])
    out_numel = shapes.numel_matrix(t["output_shapes"], t["output_dtypes"], width=1)[:, 0]
    frame = pd.DataFrame(
        {
            "event_id": t["host_op_id"].to_numpy(),
            "device_ns": dur,
            "cube_ns": np.where(cube, np.clip(dur - sched, 0, None), 0.0),
            "vector_ns": (
                np.where(vec, vector_ns(spec, t["flops"].to_numpy(dtype=float), item), 0.0)
                if spec is not None
                else 0.0
            ),
            "bytes": t["bytes"].to_numpy(dtype=float),
            "out_bytes": np.clip(out_numel, 0, None) * item,
            "kernels": 1,
            "cube": cube,
        }
    )
    g = frame.groupby("event_id", sort=False)
    out = g.agg(
        device_ns=("device_ns", "sum"),
        cube_ns=("cube_ns", "sum"),
        vector_ns=("vector_ns", "sum"),
        bytes=("bytes", "sum"),
        out_bytes=("out_bytes", "last"),
        kernels=("kernels", "sum"),
        cube=("cube", "any"),
    )
    return out


def fusion(data: RankData) -> pd.DataFrame:
    """Per pattern match: kernels, recorded device time, fused (re-costed) time, saving, and
    the host dispatch time of the ops the fusion removes. Computed once per rank (every
    fusion rule reads it); then the op stream is let go (the matches hold what is read of it
    later, and it is as large as the host ops)."""
    cached = data.cache.get("fusion")
    if cached is None:
        cached = data.cache["fusion"] = _fusion(data)
        data.cache.pop("op_stream", None)
    return cached


def fusion_members(data: RankData) -> pd.DataFrame:
    """The host ops of every pattern match: ``match`` and ``event_id``, one row per op (read
    off the op stream when :func:`fusion` re-costs the matches)."""
    fusion(data)
    return data.cache.get("fusion_members", pd.DataFrame({"match": [], "event_id": []}))


def _fusion(data: RankData) -> pd.DataFrame:
    matches, members = find(data)
    spec = data.spec
    if matches.empty or spec is None:
        return pd.DataFrame(columns=FUSION_COLUMNS)
    stream = op_stream(data)
    rows = members["row"].to_numpy()
    ids = stream["event_id"].to_numpy()[rows]
    data.cache["fusion_members"] = pd.DataFrame(
        {"match": members["match"].to_numpy(), "event_id": ids}
    )
    c = op_costs(data, np.unique(ids)).reindex(ids).fillna(0)
    glue = stream["glue"].to_numpy()[rows]
    m = members["match"].to_numpy()
    host_ns = (stream["end_ns"] - stream["start_ns"]).to_numpy(dtype=float)[rows]
    out_bytes = np.where(glue, 0.0, c["out_bytes"].to_numpy())
    frame = pd.DataFrame(
        {
            "match": m,
            "kernels": c["kernels"].to_numpy(),
            "device_ns": c["device_ns"].to_numpy(),
            "cube_ns": c["cube_ns"].to_numpy(),
            "vector_ns": c["vector_ns"].to_numpy(),
            "bytes": np.where(glue, 0.0, c["bytes"].to_numpy()),
            "out_bytes": out_bytes,
            "cube": c["cube"].to_numpy().astype(bool),
            "host_ns": host_ns,
        }
    )
    # the last non-copy op's output leaves the chain; every other op's output stays inside
    last_out = frame[~glue].groupby("match")["out_bytes"].last()
    g = frame.groupby("match")
    agg = g.agg(
        kernels=("kernels", "sum"),
        device_ns=("device_ns", "sum"),
        cube_ns=("cube_ns", "sum"),
        vector_ns=("vector_ns", "sum"),
        bytes=("bytes", "sum"),
        out_bytes=("out_bytes", "sum"),
        cube=("cube", "any"),
        host_ns=("host_ns", "sum"),
        host_max=("host_ns", "max"),
    )
    last_out = last_out.reindex(agg.index).fillna(0).to_numpy()
    external = np.maximum(agg["bytes"] - 2 * (agg["out_bytes"] - last_out), last_out)
    cores = np.where(agg["cube"], spec.cube.cores, spec.vector.cores)
    mem = memory_ns(spec, external.to_numpy(), cores)
    fused = spec.dispatch.device_sched_ns + np.maximum.reduce(
        [agg["cube_ns"].to_numpy(), agg["vector_ns"].to_numpy(), mem]
    )
    out = pd.DataFrame(
        {
            "match": agg.index.to_numpy(),
            "kernels": agg["kernels"].astype("int64").to_numpy(),
            "device_ns": agg["device_ns"].to_numpy(),
            "fused_ns": fused,
            "saved_ns": np.clip(agg["device_ns"].to_numpy() - fused, 0, None),
            "host_ns": agg["host_ns"].to_numpy(),
            "host_saved_ns": (agg["host_ns"] - agg["host_max"]).to_numpy(),
        }
    )
    return out[FUSION_COLUMNS]


ATTENTION_COLUMNS = [
    "match",
    "kernels",
    "device_ns",
    "forward_ns",
    "backward_ns",
    "fused_ns",
    "fused_forward_ns",
    "fused_backward_ns",
    "saved_ns",
    "host_ns",
    "host_saved_ns",
    "has_backward",
]
#: the keep probability assumed for the fused kernel's dropout mask (its cost hardly
#: depends on it)
KEEP_PROB = 0.9


def attention(data: RankData) -> pd.DataFrame:
    """Per attention (:func:`msprof_py.analyzers.attention.find`): its kernels and recorded
    device time (forward, backward), the fused re-cost (``FlashAttentionScore`` plus, when
    the backward was recorded, ``FlashAttentionScoreGrad``; a ``DropOutGenMaskV3`` each
    with dropout), the saving, and the host dispatch time of the ops the fusion removes (one
    op per direction stays)."""
    cached = data.cache.get("attention_costs")
    if cached is not None:
        return cached
    found = attention_finder.find(data)
    spec = data.spec
    if found.matches.empty or spec is None:
        out = pd.DataFrame(columns=ATTENTION_COLUMNS)
        data.cache["attention_costs"] = out
        return out
    m = found.members
    ids = m["event_id"].to_numpy()
    c = op_costs(data, np.unique(ids)).reindex(ids).fillna(0)
    ops = data.host_ops.set_index("event_id")
    host = (ops["end_ns"] - ops["start_ns"]).reindex(ids).fillna(0).to_numpy(dtype=float)
    frame = pd.DataFrame(
        {
            "match": m["match"].to_numpy(),
            "backward": (m["phase"] == "backward").to_numpy(),
            "device_ns": c["device_ns"].to_numpy(),
            "kernels": c["kernels"].to_numpy(),
            "host_ns": host,
        }
    )
    g = frame.groupby(["match", "backward"])
    per = g.agg(
        device_ns=("device_ns", "sum"),
        kernels=("kernels", "sum"),
        host_ns=("host_ns", "sum"),
        host_max=("host_ns", "max"),
    ).reset_index()
    fwd = per[~per["backward"]].set_index("match")
    bwd = per[per["backward"]].set_index("match")
    matches = found.matches.set_index("match")
    has_bwd = matches.index.isin(bwd.index)
    split = np.array(
        [_flash_ns(spec, r, b) for r, b in zip(matches.itertuples(), has_bwd, strict=True)],
        dtype=float,
    ).reshape(-1, 2)
    fused = split.sum(axis=1)
    idx = matches.index
    device = fwd["device_ns"].reindex(idx).fillna(0) + bwd["device_ns"].reindex(idx).fillna(0)
    host_total = fwd["host_ns"].reindex(idx).fillna(0) + bwd["host_ns"].reindex(idx).fillna(0)
    host_kept = fwd["host_max"].reindex(idx).fillna(0) + bwd["host_max"].reindex(idx).fillna(0)
    kernels = fwd["kernels"].reindex(idx).fillna(0) + bwd["kernels"].reindex(idx).fillna(0)
    out = pd.DataFrame(
        {
            "match": idx.to_numpy(),
            "kernels": kernels.astype("int64").to_numpy(),
            "device_ns": device.to_numpy(),
            "forward_ns": fwd["device_ns"].reindex(idx).fillna(0).to_numpy(),
            "backward_ns": bwd["device_ns"].reindex(idx).fillna(0).to_numpy(),
            "fused_ns": fused,
            "fused_forward_ns": split[:, 0],
            "fused_backward_ns": split[:, 1],
            "saved_ns": np.clip(device.to_numpy() - fused, 0, None),
            "host_ns": host_total.to_numpy(),
            "host_saved_ns": (host_total - host_kept).to_numpy(),
            "has_backward": has_bwd,
        }
    )[ATTENTION_COLUMNS]
    data.cache["attention_costs"] = out
    return out


def _flash_ns(spec: DeviceSpec, r: object, backward: bool) -> tuple[float, float]:
    """Device time (forward, backward) of the fused kernels replacing one attention ``r`` (a
    row of the attention matches): FlashAttentionScore and FlashAttentionScoreGrad (0 without
    a recorded backward), each with its dropout mask."""
    batch, sq, skv, d, dv = (int(getattr(r, k)) for k in ("batch", "sq", "skv", "d", "dv"))
    dtype = str(r.dtype)
    try:
        size = ITEMSIZE[canonical(dtype)]
    except (KeyError, ValueError):
        dtype, size = "float32", 4
    numels = batch * sq * skv
    q, k, v, o = (size * batch * x for x in (sq * d, skv * d, skv * dv, sq * dv))
    mask = sq * skv if r.masked else 0  # a bool [Sq, Skv] atten_mask
    stats = 2 * batch * sq * STAT_WIDTH * 4
    drop = drop_mask_cost(spec, KEEP_PROB, numels) if r.dropout else None
    drop_bytes = drop.bytes if drop is not None else 0
    drop_ns = drop.duration_ns if drop is not None else 0
    forward_bytes = q + k + v + mask + o + stats + drop_bytes
    forward = (
        drop_ns
        + flash_attention_cost(
            spec, batch=batch, sq=sq, skv=skv, d=d, dv=dv, dtype=dtype, nbytes=forward_bytes
        ).duration_ns
    )
    back = 0.0
    if backward:  # reads q, k, v, mask, dout, out, the statistics; writes dq, dk, dv
        back_bytes = q + k + v + mask + 2 * o + stats + drop_bytes + q + k + v
        back = (
            drop_ns
            + flash_attention_cost(
                spec,
                batch=batch,
                sq=sq,
                skv=skv,
                d=d,
                dv=dv,
                dtype=dtype,
                nbytes=back_bytes,
                backward=True,
            ).duration_ns
        )
    return float(forward), float(back)


def amp(data: RankData) -> pd.DataFrame:
    """The analysed fp32 cube kernels with their fp16 re-cost and the cast they would need
    (columns ``recorded_ns``, ``amp_ns``, ``cast_ns``, ``saved_ns``); empty without a spec or
    when the cube has no faster low precision."""
    spec = data.spec
    tasks = data.tasks
    k = tasks[(tasks["kind"] == KERNEL) & tasks["task_type"].isin(CUBE_TYPES)]
    k = k[shapes.first_dtype(k["input_dtypes"]).to_numpy() == "float32"]
    if spec is None or k.empty:
        return k.assign(recorded_ns=[], amp_ns=[], cast_ns=[], saved_ns=[])
    p32 = spec.cube_peak_flops(costmodel.cube_dtype(spec, "float32"))
    p16 = spec.cube_peak_flops("float16")
    sched = spec.dispatch.device_sched_ns
    dur = k["duration_ns"].to_numpy(dtype=float)
    work = np.clip(dur - sched, 0, None)
    t_c = k["flops"].to_numpy(dtype=float) / (p32 * spec.cube.efficiency) * 1e9
    t_m = memory_ns(spec, k["bytes"].to_numpy(dtype=float), np.full(len(k), spec.cube.cores))
    model = np.maximum(t_c, t_m)
    calib = np.where(model > 0, work / np.where(model > 0, model, 1), 1.0)
    amp_work = calib * np.maximum(t_c * p32 / p16, t_m / 2)
    amp_ns = sched + amp_work
    largest = shapes.numel_matrix(k["input_shapes"], k["input_dtypes"]).max(axis=1)
    largest = np.clip(largest, 0, None).astype(float)
    cast_vec = vector_ns(spec, largest, np.full(len(k), 2))
    cast_mem = memory_ns(spec, largest * 6, np.full(len(k), spec.vector.cores))
    cast_ns = sched + np.maximum(cast_vec, cast_mem)
    return k.assign(
        recorded_ns=dur,
        amp_ns=amp_ns,
        cast_ns=cast_ns,
        saved_ns=dur - amp_ns - cast_ns,
        rate_ratio=p16 / p32,
    )


def pinned_copy_ns(data: RankData, copies: pd.DataFrame) -> np.ndarray:
    """Duration of each copy re-costed from pinned host memory (recorded time without a spec)."""
    spec = data.spec
    dur = copies["duration_ns"].to_numpy(dtype=float)
    if spec is None or copies.empty:
        return dur
    kinds = {k.value: k for k in CopyKind}
    key = copies["copy_kind"].astype(str) + "|" + copies["bytes"].astype(str)
    codes, uniques = pd.factorize(key, sort=False)
    table = np.zeros(len(uniques) + 1)
    for i, u in enumerate(uniques):
        kind, nbytes = u.split("|")
        copy_kind = kinds.get(kind)
        table[i] = (
            costmodel.copy_ns(spec, copy_kind, int(nbytes), pinned=True)
            if copy_kind is not None
            else np.nan
        )
    out = table[codes]
    return np.where(np.isnan(out), dur, np.minimum(out, dur))


def aicpu_as_vector_ns(data: RankData, tasks: pd.DataFrame, dtype: pd.Series) -> np.ndarray:
    """Each AI CPU task re-costed as an AI Core vector kernel in ``dtype`` (its elements: the
    largest tensor; its bytes: the recorded bytes scaled by the dtype's size change)."""
    spec = data.spec
    if spec is None or tasks.empty:
        return np.full(len(tasks), np.nan)
    numel = np.maximum(
        shapes.numel_matrix(tasks["input_shapes"], tasks["input_dtypes"]).max(axis=1),
        shapes.numel_matrix(tasks["output_shapes"], tasks["output_dtypes"]).max(axis=1),
    )
    old_item = shapes.itemsizes(tasks["input_dtypes"])
    key = (
        pd.Series(np.clip(numel, 1, None), index=tasks.index).astype(str)
        + "|"
        + dtype.astype(str)
        + "|"
        + (tasks["bytes"] // old_item).astype(str)
    )
    codes, uniques = pd.factorize(key, sort=False)
    table = np.full(len(uniques) + 1, np.nan)
    for i, u in enumerate(uniques):
        n, dt, elements_moved = u.split("|")
        size = shapes.itemsizes(pd.Series([dt]))[0]
        cost = costmodel.vector_cost(
            spec, elements=int(n), dtype=dt, bytes_moved=int(elements_moved) * int(size)
        )
        table[i] = cost.duration_ns
    return table[codes]
