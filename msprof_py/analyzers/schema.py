"""The ``msprof analyze --json`` document: keys, table columns, and the writers (JSON, CSV).

Schema version 2. Top-level keys (tables are lists of row objects; a row's ``rank`` says which
rank it describes; times are integer ns unless a key ends in ``_us``; shares are fractions in
[0, 1]; no number is ever inf or NaN: an undefined one is null):

``schema_version``  2 (1: step times were host step marks, idle causes did not add up)
``profile``         path, command (what the focus rank ran), ranks, focus_rank, device,
                    soc_version, status per rank (``killed``: cut short), host_time,
                    step_source, steps_analysed, warmup_skipped, mean_step_ns, device_spec,
                    device_spec_error, tasks, partial (the recorder of a rank never
                    finished: the last rows may be missing), warnings (what loading noticed);
                    since 2: median_step_ns, step_windows
                    (device | host marks), outlier_steps (step, step_ns, host_step_ns,
                    ratio_to_median, kept), outlier_reference_ns (the median they are
                    compared with), optimizers_per_step (distinct optimizers ending steps,
                    or null), steps_from (the recording's ``--steps-from``), notes (text
                    lines the reader must see: outliers, several optimizers per iteration),
                    source_format (the importer that read a profile msprof-py did not
                    record: ascend_pt, msprof_prof, kineto; null for msprof-py's own)
``headline``        the focus rank's headline numbers (see :func:`headline`); since 2:
                    median_step_us, outlier_steps, comm_not_overlapped_share (computing +
                    it + free = 1), estimated_gain_model (``bound``), estimated_gain_basis,
                    estimated_gain_sum_us (the plain sum of the findings' gains, which
                    overlap: for reference only; see :mod:`msprof_py.analyzers.gains`),
                    joint_gain_us (re-costed: the step replayed once with the changes of
                    the findings in joint_gain_rules applied together; null when no fired
                    finding's change is replayable), joint_gain_sum_us (their single gains
                    added up), joint_gain_not_included (fired findings only in the bound),
                    joint_gain_by_recipe (per change a finding names, ``apply``: the
                    findings naming it, ``rules``, and their joint gain, ``gain_us``; one
                    torch.compile answers host-bound dispatch and the fusions at once),
                    joint_gain_basis
``top_ops``         ``by_type``, ``by_name`` (name + input shapes and dtypes), ``host``
``op_statistic``    msprof's op_statistic table (every op type and core type)
``copy``            ``summary`` (one object per rank), ``by_direction``
``compute_density`` ``ops`` (per kernel: FLOPs, bytes, intensity, TFLOP/s, class; the
                    longest), ``classes``, ``utilisation`` (per step: device, cube,
                    vector); since 2: ``roofline`` (every kernel with FLOPs and bytes,
                    aggregated by op type, engine and shapes, binned past 400 points;
                    ``unit`` cube | vector | ai_cpu | other)
``step_breakdown``  ``steps`` (step_trace_time columns + free time by cause; per step
                    ``computing_ns + comm_not_overlapped_ns + free_ns == step_ns`` and
                    ``idle_*_ns`` (data loading, sync, dispatch, other, copy) sum to
                    ``free_ns``; ``step_ns`` is the device window, ``host_step_ns`` the
                    host marks), ``idle`` (by cause), ``gaps`` (the longest free gaps)
``sync``            ``summary`` (per kind and name), ``points`` (the longest)
``memory``          ``summary`` (one object per rank), ``steps``, ``timeline``
``formats``         ``summary``, ``transdata`` (by cause op and conversion), ``padding``
``aicpu``           AI CPU ops with the reason and what to change
``communication``   ``summary``, ``collectives``, ``ranks`` (cluster view), ``slow_rank``
``graphs``          (since 2, graph mode) ``summary`` (one object per rank: compiled vs
                    eager device time, kernels and host dispatch per step, their shares),
                    ``graphs`` (per compiled graph: its last plan's kernels, fused kernels,
                    workspace with and without reuse, streams, compile time, code object
                    compiles, calls and device/host time per step), ``passes`` (what each
                    pass did per graph: hits and misses by reason); empty when eager
``modules``         (since 2) ``summary`` (one object per rank: device time per step by
                    phase: forward, backward, other; unlinked: tasks of no host op),
                    ``tree`` (per nn.Module instance path and its ancestors, depth first in
                    execution order: self and total device time per step, forward and
                    backward (backward ops count for their forward op's module), ops and
                    kernels per step), ``flame`` (device time of the analysed steps per
                    call stack, ``msprof --with-stack``, else per module path: ``frames``
                    ";"-joined, the op name last; ``source`` stacks | modules)
``findings``        one object per rule: rule, title, area, status (fired | ok | skipped),
                    priority (high | medium | low | null), message, advice, evidence (object),
                    estimated_gain_us (per step, or null), gain_model (modelled | heuristic |
                    null), gain_basis, share (of the step time the finding concerns), rank

:data:`TABLES` lists the columns of every table; they only ever grow within a schema version.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from msprof_py.analyzers import (
    aicpu,
    communication,
    compute,
    copies,
    flame,
    formats,
    gains,
    graphs,
    memory,
    module_tree,
    ops,
    syncs,
    timeline,
)
from msprof_py.analyzers.context import share_of
from msprof_py.analyzers.findings import plain
from msprof_py.profile.cells import file_component, neutral_cell

if TYPE_CHECKING:
    from msprof_py.analyzers.api import Analysis

SCHEMA_VERSION = 2
TOP_LEVEL = [
    "schema_version",
    "profile",
    "headline",
    "top_ops",
    "op_statistic",
    "copy",
    "compute_density",
    "step_breakdown",
    "sync",
    "memory",
    "formats",
    "aicpu",
    "communication",
    "graphs",
    "modules",
    "findings",
]
#: "section.table" -> columns
TABLES: dict[str, list[str]] = {
    "top_ops.by_type": ops.BY_TYPE_COLUMNS,
    "top_ops.by_name": ops.BY_NAME_COLUMNS,
    "top_ops.host": ops.HOST_COLUMNS,
    "op_statistic": ops.OP_STATISTIC_COLUMNS,
    "copy.by_direction": copies.DIRECTION_COLUMNS,
    "compute_density.ops": compute.DENSITY_COLUMNS,
    "compute_density.classes": compute.CLASS_COLUMNS,
    "compute_density.utilisation": compute.UTILISATION_COLUMNS,
    "compute_density.roofline": compute.ROOFLINE_COLUMNS,
    "step_breakdown.steps": timeline.BREAKDOWN_COLUMNS,
    "step_breakdown.idle": timeline.CAUSE_COLUMNS,
    "step_breakdown.gaps": timeline.GAP_COLUMNS,
    "sync.summary": syncs.SUMMARY_COLUMNS,
    "sync.points": syncs.POINT_COLUMNS,
    "memory.steps": memory.STEP_COLUMNS,
    "memory.timeline": memory.TIMELINE_COLUMNS,
    "formats.transdata": formats.TRANSDATA_COLUMNS,
    "formats.padding": formats.PADDING_COLUMNS,
    "aicpu": aicpu.COLUMNS,
    "communication.collectives": communication.COLLECTIVE_COLUMNS,
    "communication.ranks": communication.RANK_COLUMNS,
    "graphs.graphs": graphs.GRAPH_COLUMNS,
    "graphs.passes": graphs.PASS_COLUMNS,
    "modules.tree": module_tree.TREE_COLUMNS,
    "modules.flame": flame.FLAME_COLUMNS,
}
FINDING_KEYS = [
    "rule",
    "title",
    "area",
    "status",
    "priority",
    "message",
    "advice",
    "evidence",
    "estimated_gain_us",
    "gain_model",
    "gain_basis",
    "share",
    "rank",
]
HEADLINE_KEYS = [
    "rank",
    "steps",
    "mean_step_us",
    "median_step_us",
    "outlier_steps",
    "utilisation",
    "cube_utilisation",
    "vector_utilisation",
    "computing_share",
    "communication_share",
    "comm_not_overlapped_share",
    "free_share",
    "idle_share",
    "copy_ratio",
    "exposed_copy_share",
    "peak_reserved_bytes",
    "findings_fired",
    "estimated_gain_us",
    "estimated_gain_model",
    "estimated_gain_basis",
    "estimated_gain_sum_us",
    "joint_gain_us",
    "joint_gain_rules",
    "joint_gain_sum_us",
    "joint_gain_not_included",
    "joint_gain_by_recipe",
    "joint_gain_basis",
]


def records(df: pd.DataFrame, columns: list[str] | None = None) -> list[dict[str, Any]]:
    """A table as JSON-safe row objects (NaN -> null), with the documented columns in order."""
    if columns is not None:
        df = df.reindex(columns=columns)
    return plain(df.astype(object).where(df.notna(), None).to_dict("records"))


def headline(a: Analysis) -> dict[str, Any]:
    """The focus rank's headline numbers."""
    rank = a.profile["focus_rank"]

    def mine(df: pd.DataFrame) -> pd.DataFrame:
        return df[df["rank"] == rank] if "rank" in df.columns and len(df) else df

    steps = mine(a.step_breakdown["steps"])
    util = mine(a.compute_density["utilisation"])
    step_ns = float(steps["step_ns"].sum()) if len(steps) else 0.0

    def share(column: str, df: pd.DataFrame = steps) -> float:
        return share_of(float(df[column].sum()), step_ns) if len(df) else 0.0

    def per_step_us(column: str) -> float:
        return float(steps[column].mean()) / 1e3 if len(steps) else 0.0

    gain = gains.combined(
        a.findings,
        {
            "step": per_step_us("step_ns"),
            "computing": per_step_us("computing_ns"),
            "communication": per_step_us("comm_not_overlapped_ns"),
            "free": per_step_us("free_ns"),
        },
    )

    copy = next((c for c in a.copy["summary"] if c["rank"] == rank), {})
    mem = next((m for m in a.memory["summary"] if m["rank"] == rank), {})
    fired = [f for f in a.findings if f.status == "fired"]
    return plain(
        {
            "rank": rank,
            "steps": len(steps),
            "mean_step_us": a.profile["mean_step_ns"] / 1e3,
            "median_step_us": a.profile.get("median_step_ns", 0.0) / 1e3,
            "outlier_steps": [o["step"] for o in a.profile.get("outlier_steps", [])],
            "utilisation": share("device_busy_ns"),
            "cube_utilisation": share("cube_busy_ns", util),
            "vector_utilisation": share("vector_busy_ns", util),
            "computing_share": share("computing_ns"),
            "communication_share": share("communication_ns"),
            "comm_not_overlapped_share": share("comm_not_overlapped_ns"),
            "free_share": share("free_ns"),
            "idle_share": share("idle_ns"),
            "copy_ratio": copy.get("copy_ratio", 0.0),
            "exposed_copy_share": copy.get("exposed_ratio", 0.0),
            "peak_reserved_bytes": mem.get("peak_reserved"),
            "findings_fired": len(fired),
            "estimated_gain_us": gain["estimated_gain_us"],
            "estimated_gain_model": "bound",
            "estimated_gain_basis": gain["basis"],
            "estimated_gain_sum_us": gain["sum_us"],
            "joint_gain_us": a.joint.get("gain_us"),
            "joint_gain_rules": list(a.joint.get("rules") or []),
            "joint_gain_sum_us": a.joint.get("sum_us"),
            "joint_gain_not_included": list(a.joint.get("not_included") or []),
            "joint_gain_by_recipe": list(a.joint.get("by_recipe") or []),
            "joint_gain_basis": a.joint.get("basis", ""),
        }
    )


def _section(value: Any, name: str) -> Any:
    if isinstance(value, pd.DataFrame):
        return records(value, TABLES.get(name))
    if isinstance(value, dict):
        return {k: _section(v, f"{name}.{k}") for k, v in value.items()}
    return plain(value)


def to_json(a: Analysis) -> dict[str, Any]:
    """The whole analysis as the documented JSON document."""
    doc: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "profile": plain(a.profile)}
    doc["headline"] = headline(a)
    for key in TOP_LEVEL[3:-1]:
        doc[key] = _section(getattr(a, key), key)
    doc["findings"] = [f.to_dict() for f in a.findings]
    return doc


def dumps(a: Analysis) -> str:
    """The JSON document as text."""
    return json.dumps(to_json(a), indent=2, sort_keys=False)


def _neutral_text(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every text cell made safe for spreadsheets (formula starts neutralised,
    NUL bytes dropped: :func:`~msprof_py.profile.cells.neutral_cell`)."""
    out = df.copy(deep=False)
    for c in df.columns:
        column = df[c]
        if isinstance(column.dtype, pd.CategoricalDtype):
            cats = column.cat.categories
            if cats.dtype == object or pd.api.types.is_string_dtype(cats):
                out[c] = column.astype(object).map(_cell)
        elif column.dtype == object or pd.api.types.is_string_dtype(column):
            out[c] = column.map(_cell)
    return out


def _cell(value: Any) -> Any:
    return neutral_cell(value) if isinstance(value, str) else value


def write_csv(a: Analysis, folder: str | Path) -> list[Path]:
    """Every table as ``<section>_<table>.csv``, summaries as ``<section>_summary.csv``, the
    findings as ``findings.csv`` (evidence as JSON text); returns the files written."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def put(df: pd.DataFrame, name: str) -> None:
        path = folder / f"{file_component(name.replace('.', '_'))}.csv"
        _neutral_text(df).to_csv(path, index=False)
        written.append(path)

    for key in TOP_LEVEL[3:-1]:
        value = getattr(a, key)
        if isinstance(value, pd.DataFrame):
            put(value.reindex(columns=TABLES.get(key, list(value.columns))), key)
            continue
        for sub, item in value.items():
            name = f"{key}.{sub}"
            if isinstance(item, pd.DataFrame):
                put(item.reindex(columns=TABLES.get(name, list(item.columns))), name)
            elif isinstance(item, list):
                put(pd.DataFrame(item), name)
            elif isinstance(item, dict):
                put(pd.DataFrame([item]), name)
    rows = [f.to_dict() | {"evidence": json.dumps(f.to_dict()["evidence"])} for f in a.findings]
    put(pd.DataFrame(rows, columns=FINDING_KEYS), "findings")
    return written
