"""The combined estimated gain of the fired findings: a bound, never the plain sum.

Findings' gains overlap (fusing an elementwise chain and switching to a foreach optimizer
remove some of the same kernels; a larger batch fills the same idle time that faster
dispatch would), so adding them up overstates what doing everything would gain, past the
step time itself. The combined figure is an **upper bound** built from the step's partition
(every step is ``computing + communication not overlapped + free``, see
:mod:`msprof_py.analyzers.timeline`):

* each rule's gain comes out of one part of the step (:data:`PARTS`);
* within ``free`` the host causes of idle time are disjoint (dispatch, synchronisation, data
  loading, copies), so their gains add up; the batch-size gain fills the same idle time, so
  the part takes the larger of the two;
* within ``computing`` the gains may overlap: their sum is capped by the computing time;
  within ``communication`` the gains overlap: the part takes the largest;
* each part is capped by that part of the step, the total by the step.

It is not a re-costed estimate: doing everything gains at most this much. Beside it,
:func:`joint` gives a **re-costed** combined gain: the step replayed once with the changes of
every fired finding the replay can express applied together (TransData removed, every fusion
rule's chains and the attentions fused, AI CPU tasks re-costed:
:mod:`msprof_py.analyzers.replay`); the findings it
cannot express (host dispatch, syncs, batch size, AMP, the optimizer...) stay only in the
bound.
"""

from __future__ import annotations

import json
from typing import Any

from msprof_py.analyzers import replay
from msprof_py.analyzers.context import RankData
from msprof_py.analyzers.findings import FIRED, Finding

#: rule -> the part of the step its gain comes out of
PARTS: dict[str, str] = {
    "host_bound_dispatch": "free",
    "sync_in_loop": "free",
    "slow_dataloader": "free",
    "exposed_copies": "free",
    "small_copies": "free",
    "low_utilisation": "free (batch)",
    "exposed_communication": "communication",
    "slow_rank": "communication",
}
JOINT_BASIS = (
    "re-costed: the recorded launches and syncs replayed once with the changes of the "
    "included findings applied together (their tasks removed or re-costed); the other "
    "findings are only in the bound"
)
BASIS = (
    "upper bound: each finding's gain comes out of one part of the step (free time, "
    "computing, exposed communication); gains of disjoint idle causes add up, overlapping "
    "ones are capped by their part and the total by the step (not the plain sum); a gain "
    "measured on this host beside a modelled timeline (data-loading waits) is left out"
)
#: evidence key of a finding whose gain was measured beside the modelled timeline (the
#: data-loading wait of a run with host time modelled): the modelled step does not hold it
BESIDE_TIMELINE = "beside_timeline"


def part_of(rule: str) -> str:
    """The part of the step the gain of ``rule`` comes out of (``computing`` by default:
    fusion, AMP, AI CPU, optimizer and format rules save device time)."""
    return PARTS.get(rule, "computing")


def combined(findings: list[Finding], per_step: dict[str, float]) -> dict[str, Any]:
    """The combined gain (us per step) of the fired findings, bounded by the step's parts.

    ``per_step``: the mean ``step``, ``computing``, ``communication`` (not overlapped) and
    ``free`` time of a step in us. Returns ``estimated_gain_us`` (the bound),
    ``sum_us`` (the plain sum, for reference), ``by_part`` and ``basis``."""
    sums = {"free": 0.0, "free (batch)": 0.0, "computing": 0.0, "communication": 0.0}
    total = 0.0
    for f in findings:
        if f.status != FIRED or not f.estimated_gain_us:
            continue
        if f.evidence.get(BESIDE_TIMELINE):
            continue  # measured on this host, outside the modelled step: not bounded by it
        gain = max(0.0, float(f.estimated_gain_us))
        total += gain
        part = part_of(f.rule)
        if part == "communication":
            sums[part] = max(sums[part], gain)
        else:
            sums[part] += gain
    free = min(per_step.get("free", 0.0), max(sums["free"], sums["free (batch)"]))
    parts = {
        "free": free,
        "computing": min(per_step.get("computing", 0.0), sums["computing"]),
        "communication": min(per_step.get("communication", 0.0), sums["communication"]),
    }
    step = max(0.0, per_step.get("step", 0.0))
    return {
        "estimated_gain_us": min(step, sum(parts.values())),
        "sum_us": total,
        "by_part": parts,
        "basis": BASIS,
    }


def joint(data: RankData, findings: list[Finding]) -> dict[str, Any]:
    """The re-costed combined gain (us per step) of the fired findings of ``data``'s rank whose
    change the replay expresses (:func:`msprof_py.analyzers.replay.joint_gain_ns`).

    The joint gain is not the sum of the single gains: less where the changes save the same
    critical path (once one change makes the step bound by the launches, the other's device
    time is not waited for), more where one change's saving only shows once the other's
    bottleneck is gone. Returns ``gain_us`` (None when no fired finding has a replayable
    change), ``rules`` (the findings it includes, in priority order), ``sum_us`` (their
    single gains added up, for reference), ``not_included`` (fired findings with a gain the
    replay cannot express: they stay in the bound) and ``basis``."""
    fired = [f for f in findings if f.status == FIRED and f.rank in (data.rank, None)]
    kept = replay.recorded(data)
    # every replayable change, even one gaining nothing alone: with another change applied
    # it can be on the critical path (AI CPU tasks behind a launch-bound stretch)
    rules = [f.rule for f in fired if f.rule in kept]
    gain = replay.joint_gain_ns(data, rules) / 1e3 if rules else None
    return {
        "gain_us": None if gain is None else max(0.0, gain),
        "rules": rules,
        "sum_us": sum(
            (max(0.0, float(f.estimated_gain_us or 0)) for f in fired if f.rule in kept), 0.0
        ),
        "not_included": [
            f.rule for f in fired if f.rule not in kept and (f.estimated_gain_us or 0) > 0
        ],
        "by_recipe": by_recipe(data, fired, kept),
        "basis": JOINT_BASIS,
    }


def by_recipe(data: RankData, fired: list[Finding], kept: dict[str, Any]) -> list[dict[str, Any]]:
    """One change applied, the findings it answers re-costed together: for each recipe
    (``evidence["apply"]``) of the fired findings with a replayable change, the rules that
    name it (in priority order) and their joint gain (us per step). Compiling the model is
    the recipe of host-bound dispatch and of the pattern fusions at once: its gain is theirs
    together, not the sum."""
    groups: dict[str, list[str]] = {}
    recipes: dict[str, Any] = {}
    for f in fired:
        recipe = (f.evidence or {}).get("apply")
        if recipe is None or f.rule not in kept:
            continue
        key = json.dumps(recipe, sort_keys=True)
        recipes[key] = recipe
        groups.setdefault(key, []).append(f.rule)
    return [
        {
            "apply": recipes[key],
            "rules": rules,
            "gain_us": max(0.0, replay.joint_gain_ns(data, rules) / 1e3),
        }
        for key, rules in groups.items()
    ]
