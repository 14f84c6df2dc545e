"""Findings and the rule specs they come from (thresholds and text in ``rules/rules.yaml``).

A rule either **fires** (a finding with a priority, evidence and an estimated gain), is
**ok** (it looked and found nothing), or is **skipped** with the data it lacked. Priority
follows msprof-analyze advisor: ``high`` when the time the finding concerns is at least
``priority.high`` (5 %) of the step time, ``medium`` at ``priority.medium`` (3 %), else ``low``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

import numpy as np
import yaml

FIRED, OK, SKIPPED = "fired", "ok", "skipped"
STATUS_ORDER = {FIRED: 0, OK: 1, SKIPPED: 2}
PRIORITY_ORDER = {"high": 0, "medium": 1, "low": 2, None: 3}
GAIN_MODELS = ("modelled", "heuristic", "none")


class Skip(Exception):
    """Raised by a rule that cannot run; the message says what data is missing."""


def plain(value: Any) -> Any:
    """``value`` with numpy scalars and containers turned into JSON-safe Python values."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


@dataclass
class Finding:
    """One rule's verdict on one rank (times in microseconds per step)."""

    rule: str
    title: str
    area: str
    status: str
    priority: str | None
    message: str
    advice: str
    evidence: dict[str, Any]
    estimated_gain_us: float | None
    gain_model: str | None
    gain_basis: str
    share: float = 0.0
    rank: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The finding as JSON-safe values (the ``findings`` entries of ``--json``)."""
        return plain(
            {
                "rule": self.rule,
                "title": self.title,
                "area": self.area,
                "status": self.status,
                "priority": self.priority,
                "message": self.message,
                "advice": self.advice,
                "evidence": self.evidence,
                "estimated_gain_us": self.estimated_gain_us,
                "gain_model": self.gain_model,
                "gain_basis": self.gain_basis,
                "share": self.share,
                "rank": self.rank,
            }
        )

    @property
    def sort_key(self) -> tuple:
        """Fired first, by priority, then by estimated gain (largest first)."""
        gain = self.estimated_gain_us or 0.0
        return (STATUS_ORDER[self.status], PRIORITY_ORDER[self.priority], -self.share, -gain)


@dataclass(frozen=True)
class RuleSpec:
    """A rule's data: thresholds, texts and how its gain is estimated."""

    name: str
    title: str
    area: str
    thresholds: dict[str, float]
    message: str
    ok_text: str
    advice: str
    gain: str
    gain_basis: str
    high: float
    medium: float
    extra: dict[str, Any] = field(default_factory=dict)

    def priority(self, share: float) -> str:
        """Priority of a finding concerning ``share`` of the step time."""
        if share >= self.high:
            return "high"
        return "medium" if share >= self.medium else "low"

    def fire(
        self,
        values: dict[str, Any],
        share: float,
        gain_us: float | None,
        rank: int | None,
        evidence: dict[str, Any] | None = None,
    ) -> Finding:
        """A fired finding; ``values`` fill the message template and join the evidence."""
        return Finding(
            rule=self.name,
            title=self.title,
            area=self.area,
            status=FIRED,
            priority=self.priority(share),
            message=self.message.format(**_counts(values)),
            advice=_fill(self.advice, _counts(values)),
            evidence=plain({**values, **(evidence or {})}),
            estimated_gain_us=None if gain_us is None else round(max(0.0, float(gain_us)), 3),
            gain_model=None if self.gain == "none" else self.gain,
            gain_basis=self.gain_basis,
            share=float(share),
            rank=rank,
        )

    def ok(self, rank: int | None, evidence: dict[str, Any] | None = None) -> Finding:
        """The rule looked and found nothing to report."""
        return Finding(
            rule=self.name,
            title=self.title,
            area=self.area,
            status=OK,
            priority=None,
            message=self.ok_text,
            advice="",
            evidence=plain(evidence or {}),
            estimated_gain_us=None,
            gain_model=None,
            gain_basis=self.gain_basis,
            rank=rank,
        )

    def skipped(self, reason: str, rank: int | None) -> Finding:
        """The rule could not run: ``SKIPPED: <reason>``."""
        return Finding(
            rule=self.name,
            title=self.title,
            area=self.area,
            status=SKIPPED,
            priority=None,
            message=f"SKIPPED: {reason}",
            advice="",
            evidence={},
            estimated_gain_us=None,
            gain_model=None,
            gain_basis=self.gain_basis,
            rank=rank,
        )


class _Count(float):
    """A per-step count that never prints as 0 when it is not: ``{n:.0f}`` of 0.4 is "0.4"."""

    def __format__(self, spec: str) -> str:
        if spec == ".0f" and 0.0 < abs(self) < 0.95:
            return format(float(self), ".1f")
        return format(float(self), spec)


def _counts(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with its per-step counts (``*_per_step`` that are not times) as counts."""
    return {
        k: _Count(v)
        if k.endswith("per_step")
        and "_us" not in k
        and "_ns" not in k
        and isinstance(v, float)
        and not isinstance(v, bool)
        else v
        for k, v in values.items()
    }


def _fill(text: str, values: dict[str, Any]) -> str:
    """``text`` with the ``{placeholders}`` it shares with ``values`` filled in."""
    try:
        return text.format(**values)
    except (KeyError, IndexError, ValueError):
        return text


def read_rules_file(name: str) -> Any:
    """``rules/<name>`` (a YAML file shipped with the analyzers), parsed safely: by libyaml's C
    parser where PyYAML has it (the same result, about ten times faster than the pure-Python
    one, whose parse of the rule files was a fifth of an analysis of a small profile)."""
    text = resources.files("msprof_py.analyzers").joinpath(f"rules/{name}").read_text()
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@cache
def rule_specs() -> dict[str, RuleSpec]:
    """Every rule of ``rules/rules.yaml``, by name, in file order."""
    raw = read_rules_file("rules.yaml")
    high, medium = float(raw["priority"]["high"]), float(raw["priority"]["medium"])
    specs = {}
    for name, r in raw["rules"].items():
        known = {"title", "area", "thresholds", "message", "ok", "advice", "gain", "gain_basis"}
        specs[name] = RuleSpec(
            name=name,
            title=r["title"],
            area=r["area"],
            thresholds=dict(r.get("thresholds") or {}),
            message=r["message"],
            ok_text=r["ok"],
            advice=r["advice"],
            gain=r["gain"],
            gain_basis=r["gain_basis"],
            high=high,
            medium=medium,
            extra={k: v for k, v in r.items() if k not in known},
        )
    return specs


@cache
def aicpu_advice() -> dict[str, Any]:
    """``rules/aicpu.yaml``: what to change per dtype and per op type."""
    return read_rules_file("aicpu.yaml")
