"""The optimizer step: the ops and kernels inside ``Optimizer.step`` annotations.

torch records each ``optimizer.step()`` as a ``Optimizer.step#<Class>.step`` range. An
optimizer running per parameter (``foreach=False``) issues several small ops for every
parameter; a fused one (``_fused_*``) one. A multi-tensor one (``_foreach_*``) records its
``_foreach_*`` ops where they ran as multi-tensor kernels (an A2-class chip, tensors of one
dtype ...: torch_npu's fast route); where they took PyTorch's per-tensor route its recorded
(leaf) ops are per-tensor ops, told apart from a per-parameter step only by the mode the
session stored in ``meta.json`` (``optimizers``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from msprof_py.analyzers.context import RankData
from msprof_py.analyzers.intervals import assign
from msprof_py.analyzers.patterns import OPTIMIZER_ANNOTATION

FUSED_NAMES = ("_fused_", "npu_fused", "Fused")


def step_ops(data: RankData) -> tuple[pd.DataFrame, str]:
    """Host ops inside the analysed optimizer steps (with ``kernels`` and ``device_ns``) and
    the optimizer's class name ("" when there is no optimizer annotation)."""
    host = data.host
    every = data.all_host  # an annotation is stamped with the step after the one it closes
    ann = every[every["kind"] == "annotation"]
    ann = ann[ann["name"].str.match(OPTIMIZER_ANNOTATION).fillna(False).to_numpy(bool)]
    if ann.empty:
        return host.iloc[:0].assign(kernels=[], device_ns=[]), ""
    name = str(ann["name"].iloc[0])
    cls = name.split("#", 1)[-1].split(".", 1)[0] if "#" in name else name.split(".")[-1]
    ann = ann.sort_values("start_ns")
    ops = data.host_ops
    which = assign(ops["start_ns"].to_numpy(), ann["start_ns"].to_numpy(), ann["end_ns"].to_numpy())
    inside = ops[which >= 0]
    tasks = data.tasks[data.tasks["host_op_id"].isin(inside["event_id"])]
    per = tasks.groupby("host_op_id")["duration_ns"].agg(["size", "sum"])
    ids = inside["event_id"].to_numpy()
    return (
        inside.assign(
            kernels=per["size"].reindex(ids).fillna(0).to_numpy(),
            device_ns=per["sum"].reindex(ids).fillna(0).to_numpy(),
        ),
        cls,
    )


def summary(data: RankData) -> dict[str, Any]:
    """Optimizer class, its mode (``fused`` | ``foreach`` | ``per-parameter`` | ``unknown``:
    a profile without the recorded mode), whether ``_foreach_*`` ops ran as multi-tensor
    kernels, ops, kernels, device and host time per step."""
    ops, cls = step_ops(data)
    n = data.n_steps
    names = ops["name"].astype(object).astype(str)
    fused = bool(np.any([names.str.contains(m, regex=False).any() for m in FUSED_NAMES]))
    multi_tensor = bool(names.str.contains("_foreach_", regex=False).any())
    if multi_tensor:
        recorded = "foreach"
    else:
        recorded = (data.meta.get("optimizers") or {}).get(cls, {}).get("mode", "unknown")
    return {
        "rank": data.rank,
        "optimizer": cls,
        "found": bool(cls),
        "mode": "fused" if fused or cls.startswith("NpuFused") else recorded,
        "multi_tensor": multi_tensor,
        "ops_per_step": len(ops) / n,
        "kernels_per_step": float(ops["kernels"].sum()) / n,
        "device_ns_per_step": float(ops["device_ns"].sum()) / n,
        "host_ns_per_step": float((ops["end_ns"] - ops["start_ns"]).sum()) / n,
    }
