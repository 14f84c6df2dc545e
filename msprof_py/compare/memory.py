"""Device memory compared (the MemoryCompare and MemoryCompareStatistic sheets).

The statistic: the peak of the allocator's allocated and reserved bytes over the compared
steps (the ``memory`` table's statistics after each event). Per op: the allocations
(``malloc`` events) each op made (``memory.tag``: the op name), count and KB per step.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from msprof_py.compare.side import Side

MB = 1 << 20
STATISTIC_COLUMNS = {
    "index": "Index",
    "base_mb": "Base Memory(MB)",
    "new_mb": "New Memory(MB)",
    "diff_mb": "Diff Memory(MB)",
    "diff_ratio": "Diff Ratio",
}
COLUMNS = {
    "operator": "Operator Name",
    "base_allocations": "Base Allocated Times",
    "base_size_kb": "Base Allocated Memory(KB)",
    "new_allocations": "New Allocated Times",
    "new_size_kb": "New Allocated Memory(KB)",
    "diff_size_kb": "Diff Memory(KB)",
    "diff_ratio": "Diff Ratio",
}
PEAK_ALLOCATED, PEAK_RESERVED = "Peak Allocated", "Peak Reserved"


def peaks(side: Side) -> tuple[int, int]:
    """(peak allocated, peak reserved) bytes over the side's compared steps (0 without
    memory events)."""
    mem = side.data.memory
    if mem.empty:
        return 0, 0
    return int(mem["allocated"].max()), int(mem["reserved"].max())


def _ratio(new: float, base: float) -> float | None:
    return new / base if base > 0 else None


def statistic_table(base: Side, new: Side) -> pd.DataFrame:
    """Peak allocated and reserved memory of both sides (MB)."""
    (b_alloc, b_res), (n_alloc, n_res) = peaks(base), peaks(new)
    rows = [
        {
            "index": index,
            "base_mb": b / MB,
            "new_mb": n / MB,
            "diff_mb": (n - b) / MB,
            "diff_ratio": _ratio(n, b),
        }
        for index, b, n in ((PEAK_ALLOCATED, b_alloc, n_alloc), (PEAK_RESERVED, b_res, n_res))
    ]
    return pd.DataFrame(rows, columns=list(STATISTIC_COLUMNS))


def _per_op(side: Side) -> pd.DataFrame:
    mem = side.data.memory
    if mem.empty or "tag" not in mem:
        return pd.DataFrame({"allocations": [], "size": []})
    mallocs = mem[mem["action"] == "malloc"]
    tags = mallocs["tag"].astype(object).fillna("").astype(str)
    g = mallocs.groupby(tags.to_numpy(), sort=False)["size"]
    out = pd.DataFrame({"allocations": g.size(), "size": g.sum()})
    return out / side.n_steps


def memory_table(base: Side, new: Side) -> pd.DataFrame:
    """Per op (allocation tag): allocations and KB allocated per step on both sides, by
    |diff|."""
    b, n = _per_op(base), _per_op(new)
    ops = sorted(set(map(str, b.index)) | set(map(str, n.index)))
    rows = []
    for op in ops:
        b_count = float(b["allocations"].get(op, 0.0))
        n_count = float(n["allocations"].get(op, 0.0))
        b_kb, n_kb = float(b["size"].get(op, 0.0)) / 1024, float(n["size"].get(op, 0.0)) / 1024
        rows.append(
            {
                "operator": op or "(untagged)",
                "base_allocations": b_count,
                "base_size_kb": b_kb,
                "new_allocations": n_count,
                "new_size_kb": n_kb,
                "diff_size_kb": n_kb - b_kb,
                "diff_ratio": _ratio(n_kb, b_kb),
            }
        )
    out = pd.DataFrame(rows, columns=list(COLUMNS))
    if out.empty:
        return out
    order = np.lexsort((out["operator"].to_numpy(dtype=str), -out["diff_size_kb"].abs()))
    return out.iloc[order].reset_index(drop=True)
