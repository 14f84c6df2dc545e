"""Flame graphs: device time per Python call stack (or module path) in the folded format.

Brendan Gregg's folded format, which ``flamegraph.pl``, Speedscope and most flame graph
tools read, is one line per stack: the frames, outermost first, joined by ``;``, a space and
the stack's value. Here the value is the device time (us) of the analysed steps' ops under
that stack, and the op name is the leaf frame.

The stack is the one ``msprof --with-stack`` recorded per host op (``host_events.stack``).
A backward op runs in the autograd engine, where the Python stack says nothing about the
model: it takes its forward op's stack (see :mod:`msprof_py.analyzers.module_tree`) and its
leaf is ``<op> (backward)``. Without recorded stacks the frames are the module tree
(``Net;layers;3;attn;aten::mm``): a module-path flame graph.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from msprof_py.analyzers import module_tree
from msprof_py.analyzers.context import RankData
from msprof_py.analyzers.module_tree import INSTANCE_SEP

if TYPE_CHECKING:
    from msprof_py.analyzers.api import Analysis

#: ``source``: the frames are recorded Python stacks, or module paths
STACKS, MODULES = "stacks", "modules"
FLAME_COLUMNS = ["rank", "source", "frames", "device_ns"]
SEP = ";"


def has_stacks(data: RankData) -> bool:
    """The recording kept Python stacks (``msprof --with-stack``)."""
    return bool(data.meta.get("with_stack")) and "stack" in data.host_ops


def _frame(text: str) -> str:
    """One frame as the folded format can hold it (no separator, no line break)."""
    return " ".join(str(text).replace(SEP, ",").split())


def folded(data: RankData) -> pd.DataFrame:
    """Device time (ns, over the analysed steps) per distinct stack of frames
    (:data:`FLAME_COLUMNS`), the longest first; ops without device time are left out."""
    a = module_tree.attribution(data)
    a = a[a["device_ns"] > 0]
    if a.empty:
        return pd.DataFrame(columns=FLAME_COLUMNS)
    backward = (a["phase"] == module_tree.BACKWARD).to_numpy()
    names = np.array([_frame(n) for n in a["name"]], dtype=object)
    leaves = np.where(backward, names + " (backward)", names)
    if has_stacks(data):
        source = STACKS
        ops = data.host_ops
        stack = pd.Series(
            ops["stack"].astype(object).fillna("").astype(str).to_numpy(),
            index=ops["event_id"].to_numpy(),
        )
        own = stack.reindex(a["event_id"].to_numpy()).fillna("").to_numpy(dtype=object)
        fwd = stack.reindex(a["forward"].to_numpy()).fillna("").to_numpy(dtype=object)
        frames = np.where(backward & (fwd != ""), fwd, own)
    else:
        source = MODULES
        root = _frame(module_tree.root_label(a["class_path"].to_numpy()))
        paths = a["path"].to_numpy(dtype=object)
        uniq, codes = np.unique(paths.astype(str), return_inverse=True)
        per_path = np.array(
            [SEP.join([root, *(_frame(p) for p in u.split(INSTANCE_SEP) if u)]) for u in uniq],
            dtype=object,
        )
        frames = per_path[codes]
    joined = np.where(frames != "", frames + SEP + leaves, leaves)
    out = (
        pd.Series(a["device_ns"].to_numpy(dtype=np.int64))
        .groupby(joined, sort=False)
        .sum()
        .sort_values(ascending=False, kind="stable")
    )
    return pd.DataFrame(
        {
            "rank": data.rank,
            "source": source,
            "frames": out.index.astype(str),
            "device_ns": out.to_numpy(dtype=np.int64),
        },
        columns=FLAME_COLUMNS,
    )


def _us(ns: int) -> str:
    """Integer ns as us with at most 3 decimals (exact)."""
    text = f"{int(ns) // 1000}.{int(ns) % 1000:03d}".rstrip("0")
    return text.rstrip(".")


def folded_text(table: pd.DataFrame) -> str:
    """The folded file of a ``modules.flame`` table: ``frames value`` per line (value in us);
    with several ranks every stack starts with a ``rank N`` frame."""
    if table.empty:
        return ""
    several = table["rank"].nunique() > 1
    lines = []
    for r in table.itertuples(index=False):
        frames = f"rank {r.rank}{SEP}{r.frames}" if several else str(r.frames)
        lines.append(f"{frames} {_us(r.device_ns)}")
    return "\n".join(lines) + "\n"


def write_folded(a: Analysis, path: str | Path) -> tuple[int, str]:
    """Write ``a``'s flame table as a folded file; returns (lines, source of the frames)."""
    table = a.modules.get("flame")
    if table is None:
        table = pd.DataFrame(columns=FLAME_COLUMNS)
    text = folded_text(table)
    Path(path).write_text(text, encoding="utf-8")
    sources = set(table["source"]) if len(table) else set()
    source = STACKS if sources == {STACKS} else MODULES
    return len(table), source
