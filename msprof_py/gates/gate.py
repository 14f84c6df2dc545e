"""``gate(path, budget, baseline=None)``: check a profile against a budget, as ``msprof gate``.

Multi-rank profiles: every rank is checked (one check per metric and rank), so a budget is a
limit for the slowest rank as well as for all others, and a relative limit compares each rank
with the same rank of the baseline. ``rank=`` checks one rank only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msprof_py.gates.budget import Budget, load_budget
from msprof_py.gates.check import Check, check_absolute
from msprof_py.gates.diff import comparability
from msprof_py.gates.figures import GateFigures, all_ranks, figures


class GateUsageError(ValueError):
    """A gate that cannot run as asked (no baseline for relative limits, incomparable
    baseline, unknown rank): a usage error, not a failed budget."""


@dataclass
class GateResult:
    """The checks of a gate and what they were computed from."""

    path: str
    checks: list[Check]
    figures: dict[int, GateFigures]
    baseline_path: str | None = None
    baseline: dict[int, GateFigures] | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """Whether every check passed."""
        return all(c.passed for c in self.checks)

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.passed]

    @property
    def multi_rank(self) -> bool:
        return len(self.figures) > 1

    def to_json(self) -> dict[str, Any]:
        """A JSON-safe document (``msprof gate --json``)."""
        return {
            "profile": self.path,
            "baseline": self.baseline_path,
            "passed": self.passed,
            "failed": len(self.failures),
            "warnings": self.warnings,
            "checks": [c.to_dict() for c in self.checks],
        }


def noisy_warning(figs: dict[int, GateFigures], what: str) -> list[str]:
    """A warning when ``figs`` were recorded with measured (wall-clock) host time, or were
    imported (a foreign profiler's times are measured)."""
    imported = sorted({f.source_format for f in figs.values() if f.imported})
    if imported:
        return [
            f"{what} is an imported {'/'.join(imported)} profile: its times were measured on "
            "the run, so the gates on time (step, host and sync time) compare measured times "
            "with their run-to-run noise; give those limits headroom"
        ]
    if any(not f.deterministic for f in figs.values()):
        return [
            f"{what} was recorded with --host-time measured: its figures include wall-clock "
            "time and are noisy; record with --host-time modeled (the default) for an exact gate"
        ]
    return []


def rank_figures(
    path: str | Path, rank: int | None = None, warmup: int | None = None
) -> tuple[dict[int, GateFigures], str]:
    """The figures of every rank of the profile at ``path`` (or of ``rank``), and its path."""
    from msprof_py.analyzers.api import analyze
    from msprof_py.profile import ProfileError

    analysis = analyze(path, warmup=warmup)
    if rank is not None:
        if rank not in analysis.profile["ranks"]:
            raise ProfileError(f"{path}: no rank {rank} (ranks: {analysis.profile['ranks']})")
        return {rank: figures(analysis, rank)}, str(analysis.profile["path"])
    return all_ranks(analysis), str(analysis.profile["path"])


def gate(
    path: str | Path,
    budget: Budget | str | Path,
    baseline: str | Path | None = None,
    *,
    rank: int | None = None,
    warmup: int | None = None,
    force: bool = False,
) -> GateResult:
    """Check the profile at ``path`` against ``budget`` (a :class:`Budget` or a budget file),
    relative limits against the profile at ``baseline``.

    Raises :class:`~msprof_py.gates.budget.BudgetError` for a bad budget,
    :class:`GateUsageError` for relative limits without a baseline or a baseline that is not
    comparable (other device, ranks or step count; ``force`` accepts it), and
    :class:`~msprof_py.profile.ProfileError` for a profile that cannot be loaded."""
    if not isinstance(budget, Budget):
        budget = load_budget(budget)
    _need_baseline(budget, baseline is not None)
    figs, shown = rank_figures(path, rank, warmup)
    base_figs, base_shown = (None, None)
    if baseline is not None:
        base_figs, base_shown = rank_figures(baseline, rank, warmup)
    return gate_figures(figs, budget, base_figs, force=force, path=shown, baseline_path=base_shown)


def _need_baseline(budget: Budget, have: bool) -> None:
    if budget.needs_baseline and not have:
        keys = ", ".join(budget.relative_keys())
        raise GateUsageError(
            f"{budget.source} has relative limits ([relative] {keys}); give --baseline DIR "
            "(a profile of the version to compare with) or remove them"
        )


def gate_figures(
    figs: dict[int, GateFigures],
    budget: Budget,
    baseline: dict[int, GateFigures] | None = None,
    *,
    force: bool = False,
    path: str = "profile",
    baseline_path: str | None = None,
) -> GateResult:
    """:func:`gate` on figures already computed (rank -> figures, as
    :func:`~msprof_py.gates.figures.all_ranks` gives them)."""
    _need_baseline(budget, baseline is not None)
    warnings = noisy_warning(figs, path)
    if baseline is not None:
        baseline_path = baseline_path or "baseline"
        warnings += noisy_warning(baseline, f"the baseline {baseline_path}")
        reasons, notes = comparability(baseline, figs, ("the baseline", "the profile"))
        if reasons and not force:
            raise GateUsageError(
                f"the baseline is not comparable with the profile: {'; '.join(reasons)} "
                "(--force compares anyway)"
            )
        # (both measured is said by noisy_warning already)
        warnings += reasons + [n for n in notes if not n.startswith("both profiles")]
    checks: list[Check] = []
    for r, f in sorted(figs.items()):
        base = None if baseline is None else baseline.get(r)
        if budget.needs_baseline and base is None:  # only with force (ranks differ)
            warnings.append(f"the baseline has no rank {r}: its relative limits are not checked")
            checks += check_absolute(f, budget.absolute, budget.op_type_time_ms)
            continue
        checks += budget.check(f, base)
    return GateResult(path, checks, figs, baseline_path, baseline, warnings)
