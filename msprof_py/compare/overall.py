"""The overall split of a step (the OverallMetrics sheet), per side, mean over its steps.

On device: every kernel of the compared steps goes to one compute class by its op type
(msprof-analyze's rules, :mod:`msprof_py.compare.names`): Flash Attention, Conv (each split
into forward and backward), MatMul; other kernels are Other Cube (cube time modelled, or an
AI Core / MIX kernel), Vector (AI Vector Core) or Other (AI CPU ...); copies and memsets are
SDMA. Computing Time, Uncovered Communication Time, Free Time and E2E Time are
:func:`msprof_py.analyzers.timeline.step_breakdown`'s Computing, Communication (not
overlapped), Free and step time, so ``Computing + Uncovered Communication + Free == E2E``.

Without device work (a projection): the host ops a projection counts
(:mod:`msprof_py.compare.records`) are classified by name, Computing Time is the time they
cover in the step, there is no communication, and Free is the rest of the step.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from msprof_py.analyzers import intervals, timeline
from msprof_py.analyzers.context import CUBE_TYPES, KERNEL, VECTOR_TYPES
from msprof_py.compare import names
from msprof_py.compare.records import projection_mask
from msprof_py.compare.side import Side

FA_FWD, FA_BWD = "Flash Attention (Forward)", "Flash Attention (Backward)"
CONV_FWD, CONV_BWD = "Conv (Forward)", "Conv (Backward)"
MATMUL, OTHER_CUBE, VECTOR, OTHER, SDMA = "MatMul", "Other Cube", "Vector", "Other", "SDMA"
#: the compute classes, in the table's order
CLASSES = (FA_FWD, FA_BWD, CONV_FWD, CONV_BWD, MATMUL, OTHER_CUBE, VECTOR, OTHER, SDMA)
COMPUTING, COMMUNICATION, FREE, E2E = (
    "Computing Time",
    "Uncovered Communication Time",
    "Free Time",
    "E2E Time",
)
#: every index of the overall table, in order
INDEX = (*CLASSES, COMPUTING, COMMUNICATION, FREE, E2E)
#: key -> CSV/xlsx header
COLUMNS = {
    "index": "Index",
    "base_duration_ms": "Base Duration(ms)",
    "base_ratio": "Base Duration Ratio",
    "base_number": "Base Number",
    "new_duration_ms": "New Duration(ms)",
    "new_ratio": "New Duration Ratio",
    "new_number": "New Number",
    "diff_duration_ms": "Diff Duration(ms)",
    "diff_ratio": "Diff Ratio",
}


def _class_of(text_type: str, text_name: str, task_type: str, cube_ns: int, kind: str) -> str:
    if kind != KERNEL:
        return SDMA
    fam = names.family(text_type) or (names.family(text_name) if not text_type else "")
    backward = names.is_backward(text_type, text_name)
    if fam == names.FLASH_ATTENTION:
        return FA_BWD if backward else FA_FWD
    if fam == names.CONV:
        return CONV_BWD if backward else CONV_FWD
    if fam == names.MATMUL:
        return MATMUL
    if cube_ns > 0 or task_type in CUBE_TYPES:
        return OTHER_CUBE
    if task_type in VECTOR_TYPES:
        return VECTOR
    return OTHER


def classify_tasks(tasks: pd.DataFrame) -> np.ndarray:
    """The compute class of every row of ``tasks`` (kernels, copies, memsets)."""
    keys = ["op_type", "name", "task_type", "kind"]
    cube = (tasks["cube_ns"] > 0).to_numpy()
    frame = pd.DataFrame({k: tasks[k].astype(object).fillna("").astype(str) for k in keys})
    frame["cube"] = cube
    codes, uniques = pd.factorize(pd.MultiIndex.from_frame(frame))
    labels = np.array([_class_of(t, n, tt, int(c), k) for t, n, tt, k, c in uniques], dtype=object)
    return labels[codes] if len(tasks) else np.zeros(0, dtype=object)


def classify_names(op_names: pd.Series) -> np.ndarray:
    """The compute class of host ops by name (a projection: no op type, no engine)."""
    values = op_names.astype(object).fillna("").astype(str)
    codes, uniques = pd.factorize(values)
    labels = np.array([_class_of("", n, "", 0, KERNEL) for n in uniques], dtype=object)
    return labels[codes] if len(values) else np.zeros(0, dtype=object)


def side_overall(side: Side) -> dict[str, tuple[float, float]]:
    """Per index of :data:`INDEX`: (mean ns per step, mean count per step) of ``side``."""
    data, n = side.data, side.n_steps
    out: dict[str, tuple[float, float]] = {}
    if side.on_device:
        tasks = data.tasks[data.tasks["kind"].isin((KERNEL, "memcpy", "memset"))]
        classes, times = classify_tasks(tasks), tasks["duration_ns"].to_numpy()
        breakdown = timeline.step_breakdown(data)
        computing = float(breakdown["computing_ns"].sum())
        communication = float(breakdown["comm_not_overlapped_ns"].sum())
        e2e = float(breakdown["step_ns"].sum())
        free = float(breakdown["free_ns"].sum())
        kernels = int((tasks["kind"] == KERNEL).sum())
    else:
        ops = data.host_ops
        ops = ops[projection_mask(ops, side.peer_names)]
        classes = classify_names(ops["name"])
        times = (ops["end_ns"] - ops["start_ns"]).clip(lower=0).to_numpy()
        lo = data.steps["dev_start_ns"].to_numpy(dtype=np.int64)
        hi = data.steps["dev_end_ns"].to_numpy(dtype=np.int64)
        cover = intervals.Coverage(
            ops["start_ns"].to_numpy(dtype=np.int64), ops["end_ns"].to_numpy(dtype=np.int64)
        )
        computing = float(np.sum(cover.within(lo, hi))) if len(ops) else 0.0
        communication = 0.0
        e2e = float(np.sum(hi - lo))
        free = max(0.0, e2e - computing)
        kernels = len(ops)
    for cls in CLASSES:
        mask = classes == cls
        out[cls] = (float(times[mask].sum()) / n, float(mask.sum()) / n)
    out[COMPUTING] = (computing / n, kernels / n)
    out[COMMUNICATION] = (communication / n, 0.0)
    out[FREE] = (free / n, 0.0)
    out[E2E] = (e2e / n, 0.0)
    if side.on_device:
        coll = data.tasks["kind"] == "collective"
        out[COMMUNICATION] = (communication / n, float(coll.sum()) / n)
    return out


def _ratio(part: float, whole: float) -> float:
    return part / whole if whole > 0 else 0.0


def overall_table(base: Side, new: Side) -> pd.DataFrame:
    """The OverallMetrics table (:data:`COLUMNS`): per index, both sides' mean duration per
    step (ms), its share of the side's E2E time, its count per step, and new - base."""
    b, n = side_overall(base), side_overall(new)
    b_e2e, n_e2e = b[E2E][0], n[E2E][0]
    rows = []
    for index in INDEX:
        (b_ns, b_num), (n_ns, n_num) = b[index], n[index]
        rows.append(
            {
                "index": index,
                "base_duration_ms": b_ns / 1e6,
                "base_ratio": _ratio(b_ns, b_e2e),
                "base_number": b_num,
                "new_duration_ms": n_ns / 1e6,
                "new_ratio": _ratio(n_ns, n_e2e),
                "new_number": n_num,
                "diff_duration_ms": (n_ns - b_ns) / 1e6,
                "diff_ratio": n_ns / b_ns if b_ns > 0 else None,
            }
        )
    return pd.DataFrame(rows, columns=list(COLUMNS))
