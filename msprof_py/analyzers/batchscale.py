"""What the device work of a step becomes at a larger batch (the batch-size what-if).

Every recorded task is sorted into work that grows with the batch and work that does not: a
task grows when one of its tensors carries the batch in its first dimension (activations, their
gradients, the input copies), and stays when none does (weight updates, optimizer states,
gradient all-reduces). A tensor carries the batch when its first dimension is the batch, or a
multiple of it (``batch x sequence`` rows, ``batch x heads`` attention matrices) in a shape no
optimizer step touches (parameter shapes never carry it). A growing cube kernel (MatMul,
BatchMatMul, the convolutions) is re-costed with the cost model's GEMM tiling at the larger
batch (the batch enters M of a forward GEMM and of the input gradient, K of a weight
gradient, the batch axis of a batched matmul): larger GEMMs tile more efficiently, which a
linear extrapolation would miss. Any other growing kernel is re-costed as the cost model
builds its time: its blocks multiply with the batch up to the cores its engine has, each
core's share of the work (cube, vector and HBM terms) grows by what the extra cores cannot
absorb, the HBM term also by the bandwidth the extra cores add up to the chip's achievable
rate, and the scheduling overhead stays. A small kernel that ran on a few cores therefore
gets a larger batch almost for free, a kernel already on every core takes ``factor`` times as
long. Copies and memsets grow linearly with their bytes. The result is a ratio, applied to
the step's device busy time (which already accounts for overlap between streams).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from msprof_py.analyzers import ampplan, shapes
from msprof_py.analyzers.context import AICPU_TYPES, CUBE_TYPES, KERNEL, MEMCPY, RankData
from msprof_py.device import costmodel
from msprof_py.device.dtypes import itemsize
from msprof_py.device.spec import DeviceSpec, SpecError

#: task kinds whose time counts as device work (events take none)
_WORK_KINDS = (KERNEL, MEMCPY, "memset", "collective")


def carries_batch(shape: tuple[int, ...], batch: int, params: frozenset[tuple[int, ...]]) -> bool:
    """Whether a tensor of ``shape`` carries the batch in its first dimension (see the module)."""
    if not shape or batch <= 0:
        return False
    head = shape[0]
    if head == batch:
        return True
    return head > batch and head % batch == 0 and shape not in params


def optimizer_ops(data: RankData) -> np.ndarray:
    """Event ids of the host ops inside ``Optimizer.step`` ranges (their work is per
    parameter: it never grows with the batch)."""
    ops = data.all_host_ops
    return ops.loc[ampplan.in_optimizer(data, ops), "event_id"].to_numpy()


def parameter_shapes(data: RankData, inside: np.ndarray) -> frozenset[tuple[int, ...]]:
    """Shapes of the tensors the kernels of the optimizer ops ``inside`` read or write."""
    t = data.all_tasks
    t = t[np.isin(t["host_op_id"].to_numpy(), inside)]
    found: set[tuple[int, ...]] = set()
    for text in pd.unique(pd.concat([t["input_shapes"], t["output_shapes"]]).astype(str)):
        found.update(d for d in shapes.parse(text) if d)
    return frozenset(found)


def grows_with_batch(
    tasks: pd.DataFrame,
    batch: int,
    params: frozenset[tuple[int, ...]] = frozenset(),
    fixed_ops: np.ndarray | None = None,
) -> np.ndarray:
    """Per task: one of its input or output tensors carries the batch. A kernel recorded
    without any tensor description is taken to grow (the safe side of the estimate), as is a
    host-to-device copy without one, a read back (a value) not; a task launched by one of
    ``fixed_ops`` (the optimizer's) never grows."""
    if tasks.empty:
        return np.zeros(0, dtype=bool)
    codes, combos = shapes.factorize(
        tasks["input_shapes"], tasks["output_shapes"], tasks["input_dtypes"], tasks["output_dtypes"]
    )
    carried = np.array(
        [
            any(carries_batch(d, batch, params) for d in shapes.parse(f"{i};{o}"))
            for i, o, _, _ in combos
        ],
        dtype=bool,
    )[codes]
    # no tensor described at all (0-d tensors have a dtype and an empty shape)
    shapeless = np.array([not (i or o or di or do) for i, o, di, do in combos], dtype=bool)[codes]
    # an input copy from the host carries the batch; a read back (a loss value) does not
    kernel_or_input = (tasks["kind"] == KERNEL).to_numpy() | (
        tasks["copy_kind"].astype(str) == H2D
    ).to_numpy()
    grows = carried | (shapeless & kernel_or_input)
    if fixed_ops is not None and len(fixed_ops):
        grows &= ~np.isin(tasks["host_op_id"].to_numpy(), fixed_ops)
    return grows


H2D = "HOST_TO_DEVICE"
_CONV_FORWARD = ("Conv2D", "Conv1D", "Conv3D")
_MATMULS = ("MatMul", "BatchMatMul", "MatMulV2", "BatchMatMulV2")


def gemm_growth(
    spec: DeviceSpec,
    op_type: str,
    ins: list[tuple[int, ...]],
    outs: list[tuple[int, ...]],
    dtype: str,
    factor: float,
    batch: int,
    params: frozenset[tuple[int, ...]],
) -> float | None:
    """Duration at ``factor`` times the batch over now, by the cost model's GEMM tiling, for a
    cube kernel whose (m, n, k) its shapes say; None when they do not."""
    dims = _gemm(op_type, ins, outs, batch, params)
    if dims is None:
        return None
    m, n, k, groups, grown = dims
    scaled = [m, n, k, groups]
    scaled[grown] = max(1, round(scaled[grown] * factor))
    # the HBM traffic of what the kernel reads and writes (an implicit GEMM reads its input
    # once, not the im2col matrix), the batch-carrying tensors grown
    size = itemsize(dtype)
    tensors = [*ins, *outs]
    bytes_now = sum(math.prod(d) for d in tensors) * size
    bytes_then = sum(
        math.prod(d) * (factor if carries_batch(d, batch, params) else 1) for d in tensors
    )
    try:
        now = costmodel.matmul_cost(spec, m, n, k, batch=groups, dtype=dtype, bytes_moved=bytes_now)
        then = costmodel.matmul_cost(
            spec, scaled[0], scaled[1], scaled[2], batch=scaled[3], dtype=dtype,
            bytes_moved=round(bytes_then * size),
        )  # fmt: skip
    except (SpecError, ValueError, KeyError):
        return None
    return then.duration_ns / now.duration_ns if now.duration_ns > 0 else None


def _gemm(
    op_type: str,
    ins: list[tuple[int, ...]],
    outs: list[tuple[int, ...]],
    batch: int,
    params: frozenset[tuple[int, ...]],
) -> tuple[int, int, int, int, int] | None:
    """(m, n, k, groups, index of the dimension the batch grows) of a cube kernel."""
    if op_type in _CONV_FORWARD and len(ins) >= 2 and outs and len(ins[1]) >= 2:
        x, w, y = ins[0], ins[1], outs[0]
        groups = max(1, x[1] // w[1]) if len(x) > 1 and w[1] else 1
        return y[0] * math.prod(y[2:]), w[0] // groups, math.prod(w[1:]), groups, 0
    if op_type in ("Conv2DBackpropInput", "Conv2DBackpropFilter") and len(ins) >= 3:
        go, x, w = ins[0], ins[1], ins[2]
        if len(go) < 2 or len(x) < 2 or len(w) < 2 or not w[1]:
            return None
        groups = max(1, x[1] // w[1])
        if op_type == "Conv2DBackpropInput":
            m = x[0] * math.prod(x[2:])
            return m, x[1] // groups, (go[1] // groups) * math.prod(w[2:]), groups, 0
        return go[1] // groups, math.prod(w[1:]), go[0] * math.prod(go[2:]), groups, 2
    if op_type in _MATMULS:
        mats = [d for d in ins if len(d) >= 2]
        if len(mats) < 2:
            return None
        a, b = mats[-2], mats[-1]
        groups = math.prod(a[:-2]) if len(a) > 2 else 1
        m, k, n = a[-2], a[-1], b[-1]
        if len(a) > 2 and carries_batch(a, batch, params):
            return m, n, k, groups, 3
        if carries_batch(a, batch, params):
            return m, n, k, groups, 0
        if carries_batch(b, batch, params):
            return m, n, k, groups, 2
        return None
    return None


def _cores(spec: DeviceSpec, task_type: np.ndarray) -> np.ndarray:
    cube = np.isin(task_type, CUBE_TYPES)
    aicpu = np.isin(task_type, AICPU_TYPES)
    vector = np.full(len(task_type), spec.vector.cores, dtype=float)
    return np.where(cube, spec.cube.cores, np.where(aicpu, spec.aicpu.cores, vector))


def scaled_durations(
    spec: DeviceSpec,
    tasks: pd.DataFrame,
    grows: np.ndarray,
    factor: float,
    batch: int = 0,
    params: frozenset[tuple[int, ...]] = frozenset(),
) -> np.ndarray:
    """Each task's duration (ns) with the batch ``factor`` times larger (see the module)."""
    duration = (tasks["end_ns"] - tasks["start_ns"]).to_numpy(dtype=float)
    kernel = (tasks["kind"] == KERNEL).to_numpy()
    cube = tasks["cube_ns"].to_numpy(dtype=float)
    vector = tasks["vector_ns"].to_numpy(dtype=float)
    memory = tasks["memory_ns"].to_numpy(dtype=float)
    work = np.maximum(np.maximum(cube, vector), memory)
    sched = np.maximum(duration - work, 0.0)
    cores = _cores(spec, tasks["task_type"].astype(str).to_numpy())
    blocks = np.maximum(tasks["block_dim"].to_numpy(dtype=float), 1.0)
    par_now = np.minimum(blocks, cores)
    par_then = np.minimum(blocks * factor, cores)
    share = factor * par_now / par_then  # each core's share of the work, relative to now
    per_core = spec.memory.gm_bytes_per_cycle_per_core * spec.cube.clock_hz
    bw_now = np.minimum(spec.memory.effective_bandwidth, par_now * per_core)
    bw_then = np.minimum(spec.memory.effective_bandwidth, par_then * per_core)
    work_then = np.maximum(
        np.maximum(cube * share, vector * share), memory * factor * bw_now / bw_then
    )
    # a kernel recorded without its roofline terms (older profiles): linear, the safe side
    no_terms = work <= 0
    kernel_then = np.where(no_terms, duration * factor, sched + work_then)
    scaled = np.where(kernel, kernel_then, duration * factor)
    cube_rows = np.flatnonzero(grows & kernel & (cube > 0))
    if len(cube_rows):
        sub = tasks.iloc[cube_rows]
        codes, combos = shapes.factorize(
            sub["op_type"], sub["input_shapes"], sub["output_shapes"], sub["input_dtypes"]
        )
        ratios = []
        for op_type, ins, outs, dtypes in combos:
            dtype = (dtypes.split(";") or ["float16"])[0] or "float16"
            ratios.append(
                gemm_growth(
                    spec,
                    op_type,
                    shapes.parse(ins),
                    shapes.parse(outs),
                    dtype,
                    factor,
                    batch,
                    params,
                )
            )
        ratio = np.array([np.nan if r is None else r for r in ratios])[codes]
        known = ~np.isnan(ratio)
        scaled[cube_rows[known]] = duration[cube_rows[known]] * ratio[known]
    return np.where(grows, scaled, duration)


def busy_ratio(data: RankData, batch: int, factor: float) -> float:
    """Device work of the analysed steps at ``factor`` times the batch, over now (>= 1 when
    work grows; 1 when nothing in the profile carries the batch)."""
    spec = data.spec
    t = data.tasks
    t = t[t["kind"].isin(_WORK_KINDS)]
    if spec is None or t.empty:
        return float(factor)
    before = (t["end_ns"] - t["start_ns"]).to_numpy(dtype=float)
    total = float(before.sum())
    if total <= 0:
        return float(factor)
    fixed = optimizer_ops(data)
    params = parameter_shapes(data, fixed)
    grows = grows_with_batch(t, batch, params, fixed)
    after = scaled_durations(spec, t, grows, factor, batch, params)
    return float(after.sum()) / total
