"""``analyze(profile_or_path)``: every analysis and the findings of a stored profile.

Tables cover the selected ranks (all by default), each row with its ``rank``; the findings are
those of the focus rank (the one selected, else the first) plus the cluster rules over all
ranks. Times are integer nanoseconds in the tables and microseconds per step in the findings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from msprof_py.analyzers import (
    aicpu,
    communication,
    compute,
    context,
    copies,
    engine,
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
from msprof_py.analyzers.findings import Finding
from msprof_py.analyzers.rules_compute import RuleContext
from msprof_py.profile import Profile, ProfileError, load

Section = dict[str, Any]


@dataclass
class Analysis:
    """The results of :func:`analyze`: one dict per section (DataFrames and summaries) and the
    findings, in priority order. :mod:`msprof_py.analyzers.schema` documents every key."""

    profile: Section
    top_ops: Section
    op_statistic: pd.DataFrame
    copy: Section
    compute_density: Section
    step_breakdown: Section
    sync: Section
    memory: Section
    formats: Section
    aicpu: pd.DataFrame
    communication: Section
    findings: list[Finding] = field(default_factory=list)
    #: graph mode: ``summary`` (compiled vs eager parts of the step, one object per rank),
    #: ``graphs`` (one row per compiled graph), ``passes`` (what the passes did)
    graphs: Section = field(default_factory=dict)
    #: the module tree: ``summary`` (one object per rank), ``tree`` (one row per module
    #: instance path: self/total device time per step, forward/backward), ``flame`` (device
    #: time per call stack or module path, for flame graphs)
    modules: Section = field(default_factory=dict)
    #: the focus rank's re-costed combined gain (:func:`msprof_py.analyzers.gains.joint`)
    joint: Section = field(default_factory=dict)

    def __repr__(self) -> str:
        """One line: the profile, its steps and the findings that fired (a REPL prints it)."""
        info = self.profile
        steps = len(info.get("steps_analysed") or [])
        mean = info.get("mean_step_ns")
        step = f", mean step {mean / 1e6:,.3f} ms" if isinstance(mean, (int, float)) else ""
        fired = [f.rule for f in self.fired()]
        shown = ", ".join(fired[:5]) + (", ..." if len(fired) > 5 else "")
        findings = f"{len(fired)} finding{'s' if len(fired) != 1 else ''} fired"
        findings += f" ({shown})" if fired else ""
        return (
            f"<Analysis of {str(info.get('path'))!r}: ranks {info.get('ranks')}, "
            f"{steps} step{'s' if steps != 1 else ''} analysed{step}, {findings}>"
        )

    def fired(self) -> list[Finding]:
        """The findings that fired, in priority order."""
        return [f for f in self.findings if f.status == "fired"]

    def finding(self, rule: str) -> Finding:
        """The finding of ``rule`` (raises KeyError when there is none)."""
        for f in self.findings:
            if f.rule == rule:
                return f
        raise KeyError(rule)

    def to_json(self) -> dict[str, Any]:
        """The stable JSON document (``msprof analyze --json``)."""
        from msprof_py.analyzers.schema import to_json

        return to_json(self)


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    frames = [f for f in frames if len(f)] or frames[:1]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


#: how many folder levels below a path that holds no profile :func:`resolve` looks for one
SEARCH_DEPTH = 3
#: at most this many of several profiles found are named in the error
NAMED = 6


def resolve(path: str | Path, **how: Any) -> Profile:
    """Load ``path``; a folder holding one profile somewhere below it (``msprof --output``'s
    run folder, a torch_npu ``*_ascend_pt`` folder or a run of rank folders inside a
    parent, a ``PROF_*`` folder, a Kineto trace), up to :data:`SEARCH_DEPTH` levels down,
    works too. Several profiles below it are an error naming them (never a silent pick), none
    one line saying what was looked for. ``how``: :func:`msprof_py.load`'s keywords."""
    path = Path(path)
    if not path.is_dir() or is_profile(path):
        return load(path, **how)
    found = profiles_below(path)
    if len(found) == 1:
        return load(found[0], **how)
    if found:
        names = [str(p.relative_to(path)) for p in found]
        shown = ", ".join(names[:NAMED]) + (
            f" and {len(names) - NAMED} more" if len(names) > NAMED else ""
        )
        raise ProfileError(f"{path}: {len(found)} profiles below it ({shown}); name one")
    from msprof_py.profile.loading import looked_for

    raise ProfileError(
        f"{path}: no profile here or in its subfolders up to {SEARCH_DEPTH} levels down "
        f"(looked for {looked_for()})"
    )


def is_profile(folder: Path) -> bool:
    """Whether :func:`msprof_py.load` reads ``folder`` (msprof-py's raw folders, or a format
    an importer detects)."""
    from msprof_py.importers import find
    from msprof_py.profile.loading import raw_folders

    return bool(raw_folders(folder)) or find(folder) is not None


def profiles_below(path: Path, depth: int = SEARCH_DEPTH) -> list[Path]:
    """The folders below ``path`` (at most ``depth`` levels down, hidden ones left out) that
    are profiles, in sorted order; the folders inside a profile are not searched (its rank
    folders are its own)."""
    found: list[Path] = []
    level = [path]
    for _ in range(depth):
        deeper: list[Path] = []
        for folder in level:
            try:
                subs = sorted(
                    p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")
                )
            except OSError:
                continue
            for sub in subs:
                (found if is_profile(sub) else deeper).append(sub)
        level = deeper
    return sorted(found)


def analyze(
    profile: Profile | str | Path,
    *,
    rank: int | None = None,
    top: int = 10,
    warmup: int | None = None,
    batch_size: int | None = None,
    keep_outliers: bool = False,
    tuner: Callable[[Any], Any] | None = None,
) -> Analysis:
    """Analyse a profile (or the path of one): tables for ``rank`` (all ranks when None) and the
    findings of ``rank`` (the first rank when None) plus the cluster rules.

    ``warmup``: analysed steps leave out this many first training steps (default: the
    first step when the recording starts at the process's first step and holds two or
    more). Outlier steps (more than 3x the median step time) are left out of the analysed
    steps and listed in ``profile["outlier_steps"]``, unless ``keep_outliers``.
    ``batch_size``: the batch size, when it cannot be inferred. ``tuner``: runs the auto
    batch tuner for the batch-size finding (:func:`msprof_py.analyzers.batchtune.run`, what
    ``msprof analyze --tune-batch`` passes); without it the finding estimates.
    """
    loaded_here = not isinstance(profile, Profile)
    if loaded_here:
        # strings as categoricals, as analysed, and only the columns the analyses read
        profile = resolve(profile, categorical=True, columns=context.READ_COLUMNS)
    if not profile.ranks:
        raise ProfileError(f"{profile.path}: the profile has no ranks")
    if rank is not None and rank not in profile.ranks:
        raise ProfileError(f"{profile.path}: no rank {rank} (ranks: {profile.ranks})")
    per_rank = {r: context.prepare(profile, r, warmup, keep_outliers) for r in profile.ranks}
    if loaded_here:  # the prepared copies hold what is needed: let the loaded strings go
        profile = Profile(profile.path, profile.meta, {}, profile.warnings, profile.partial)
    selected = [rank] if rank is not None else profile.ranks
    focus = per_rank[selected[0]]
    data = [per_rank[r] for r in selected]

    def each(fn: Any, *args: Any) -> pd.DataFrame:
        return _concat([fn(d, *args) for d in data])

    ctx = RuleContext(focus, per_rank, batch_size, tuner)
    findings = engine.run(ctx)
    cluster = communication.ranks(per_rank)
    return Analysis(
        profile=_profile_info(profile, focus, per_rank),
        top_ops={
            "by_type": each(ops.top_ops_by_type, top),
            "by_name": each(ops.top_ops_by_name, top),
            "host": each(ops.host_ops, top),
        },
        op_statistic=each(ops.op_statistic),
        copy={
            "summary": [copies.summary(d) for d in data],
            "by_direction": each(copies.by_direction),
        },
        compute_density={
            "ops": each(compute.density, top),
            "classes": each(compute.by_class),
            "utilisation": each(compute.utilisation),
            "roofline": each(compute.roofline),
        },
        step_breakdown={
            "steps": each(timeline.step_breakdown),
            "idle": each(timeline.idle_by_cause),
            "gaps": _concat(
                [
                    timeline.idle_gaps(d).nlargest(top, "duration_ns").reset_index(drop=True)
                    for d in data
                ]
            ),
        },
        sync={"summary": each(syncs.summary), "points": each(syncs.top_points, top)},
        memory={
            "summary": [memory.summary(d, batch_size) for d in data],
            "steps": each(memory.per_step),
            "timeline": each(memory.timeline),
        },
        formats={
            "summary": [formats.summary(d) for d in data],
            "transdata": each(formats.transdata),
            "padding": each(formats.padding),
        },
        aicpu=each(aicpu.table),
        communication={
            "summary": [communication.summary(d) for d in data],
            "collectives": each(communication.collectives),
            "ranks": cluster,
            "slow_rank": communication.slow_rank(cluster, per_rank),
        },
        findings=findings,
        graphs={
            "summary": [graphs.split(d) for d in data],
            "graphs": each(graphs.per_graph),
            "passes": each(graphs.passes),
        },
        modules={
            "summary": [module_tree.summary(d) for d in data],
            "tree": each(module_tree.tree),
            "flame": each(flame.folded),
        },
        joint=gains.joint(focus, findings),
    )


def _profile_info(
    profile: Profile, focus: context.RankData, per_rank: dict[int, context.RankData]
) -> Section:
    meta = focus.meta
    choice = focus.choice
    return {
        "path": str(profile.path),
        "command": meta.get("command"),
        "ranks": profile.ranks,
        "focus_rank": focus.rank,
        "device": meta.get("device"),
        "soc_version": meta.get("soc_version"),
        "status": {r: d.meta.get("status") for r, d in per_rank.items()},
        "host_time": meta.get("host_time"),
        "source_format": meta.get("source_format"),
        "step_source": focus.step_source,
        "steps_analysed": [int(s) for s in focus.steps["step"]],
        "warmup_skipped": focus.warmup_skipped,
        "mean_step_ns": focus.mean_step_ns,
        "median_step_ns": focus.median_step_ns,
        "step_windows": choice.windows,
        "outlier_steps": choice.outliers,
        "outlier_reference_ns": choice.outlier_reference_ns,
        "optimizers_per_step": _optimizers_per_step(focus),
        "steps_from": meta.get("steps_from", "optimizer"),
        "notes": notes(focus),
        "device_spec": None if focus.spec is None else focus.spec.name,
        "device_spec_error": focus.spec_error or None,
        "tasks": len(focus.all_tasks),
        "partial": profile.partial,
        "warnings": list(profile.warnings),
    }


def _optimizers_per_step(data: context.RankData) -> float | None:
    """How many optimizers' step() ends the recorded steps (a GAN: 2), None when unknown."""
    return float(data.choice.optimizers) if data.choice.optimizers else None


def notes(data: context.RankData) -> list[str]:
    """What a reader must know about the steps: outliers left out, several optimizers per
    iteration, step windows taken from host marks."""
    out: list[str] = []
    choice = data.choice
    ref = choice.outlier_reference_ns
    for o in choice.outliers:
        ratio = o["ratio_to_median"]
        how = f"{ratio:.1f}x" if ratio is not None else "far from"
        fate = "kept in" if o["kept"] else "left out of"
        out.append(
            f"step {o['step']} is an outlier ({o['step_ns'] / 1e6:,.3f} ms, {how} the "
            f"median {ref / 1e6:,.3f} ms): {fate} the per-step figures"
        )
    steps_from = data.meta.get("steps_from", "optimizer")
    if choice.optimizers > 1 and steps_from == "optimizer":
        out.append(
            f"{choice.optimizers} optimizers step in this run and every optimizer.step() ends "
            f"a step: one training iteration counts as {choice.optimizers} steps (record with "
            "msprof --steps-from N to end steps only at optimizer N's step(), or --steps-from "
            "marks with prof.step() / msprof_py.step() in the loop)"
        )
    if data.step_source in ("task step numbers", "whole run (no steps)"):
        out.append(
            "no step boundary was recorded (no optimizer.step(), prof.step() or msprof_py.step() "
            "ran): the whole run counts as one step; call msprof_py.step() at the end of each "
            "iteration for per-step figures"
        )
    if choice.windows != "device" and len(data.all_tasks):
        out.append("no analysed step launched device work: step times are host marks")
    return out
