"""Bottleneck findings for one launch, from its blocks' pipe ratios and instruction stream.

Rules (thresholds below; ratios are busy cycles over the block's cycles, averaged over blocks):

- ``mte2-bound``: MTE2 busy >= 50 % of the time while V and M each stay <= 30 %: the core
  waits for GM; bigger copies (the bandwidth tables grow with bytes per instruction) or fewer
  passes over GM help.
- ``scalar-bound``: the scalar unit busy >= 50 % and more than any other pipe: address math or
  per-element GetValue / SetValue dominates; move it to vector instructions or hoist it.
- ``unbalanced-blocks``: the slowest block takes >= 1.25 x the mean block's cycles: the launch
  waits for it; split the work evenly (tiling by element count, not by rows).
- ``no-double-buffering``: in a block, MTE2 and V both work (2+ instructions each), alternate
  (3+ switches between them in start order) and overlap for < 5 % of the smaller one's busy
  time: a depth-1 queue makes each copy wait for the compute to free the buffer; a depth-2
  TQue (``pipe.InitBuffer(q, 2, bytes)``) overlaps the copy of tile i+1 with tile i. A split
  mix block's AIVs are judged one by one.
- ``cross-core-wait`` (split mix kernels): a unit (AIC or AIV) spends >= 30 % of its cycles
  idle in ``CrossCoreWaitFlag`` (every pipe drained, dispatch held until the other side's
  flag arrives), averaged over blocks: the two sides serialise on their hand-offs.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from msprof_py.kernels.results import BlockResult, LaunchResult
from msprof_py.kernels.timeline import Instr, Pipe

MTE2_BOUND = 0.5
IDLE_UNIT = 0.3
SCALAR_BOUND = 0.5
UNBALANCED = 1.25
OVERLAP_MAX = 0.05
MIN_SWITCHES = 3
CROSS_CORE_WAIT = 0.3


@dataclass(frozen=True)
class Finding:
    """One bottleneck: a rule id, the evidence in numbers and what to try."""

    rule: str
    message: str

    def __str__(self) -> str:
        return f"[{self.rule}] {self.message}"


def mean_ratios(result: LaunchResult) -> dict[str, float]:
    """Each pipe's busy share of its block, averaged over blocks."""
    blocks = result.blocks
    pipes = [p.value for p in Pipe if p is not Pipe.ALL]
    if not blocks:
        return dict.fromkeys(pipes, 0.0)
    return {p: sum(b.ratio(p) for b in blocks) / len(blocks) for p in pipes}


def _intervals(instrs: list[Instr], pipe: Pipe) -> list[tuple[int, int]]:
    return [(i.start, i.end) for i in instrs if i.pipe is pipe and i.cycles]


def _overlap(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    total, j = 0, 0
    b = sorted(b)
    for s, e in sorted(a):
        while j < len(b) and b[j][1] <= s:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            total += max(0, min(e, b[k][1]) - max(s, b[k][0]))
            k += 1
    return total


def alternation(block: BlockResult | list[Instr]) -> tuple[int, float, int]:
    """(switches between MTE2 and V in start order, overlap share of the smaller busy time,
    MTE2 waits on a freed buffer) for one block (or one unit's instructions)."""
    instrs = block if isinstance(block, list) else block.instructions
    moves = [i for i in instrs if i.cycles and i.pipe in (Pipe.MTE2, Pipe.V)]
    moves.sort(key=lambda i: i.start)
    switches = sum(1 for a, b in itertools.pairwise(moves) if a.pipe is not b.pipe)
    mte2 = _intervals(instrs, Pipe.MTE2)
    vec = _intervals(instrs, Pipe.V)
    smaller = min(sum(e - s for s, e in mte2), sum(e - s for s, e in vec))
    share = _overlap(mte2, vec) / smaller if smaller else 0.0
    freed_waits = sum(
        1 for i in instrs if i.pipe is Pipe.MTE2 and any("freed" in why for why, _ in i.waits)
    )
    return switches, share, freed_waits


def _no_double_buffering(result: LaunchResult) -> Finding | None:
    hits = []
    for b in result.blocks:
        # a split block's AIVs each have their own MTE2 and V: judge each one
        streams = [sb.instructions for sb in b.sub_blocks if sb.unit == "aiv"] or [b.instructions]
        for instrs in streams:
            n_mte2 = sum(1 for i in instrs if i.pipe is Pipe.MTE2 and i.cycles)
            n_vec = sum(1 for i in instrs if i.pipe is Pipe.V and i.cycles)
            if n_mte2 < 2 or n_vec < 2:
                continue
            switches, share, waits = alternation(instrs)
            if switches >= MIN_SWITCHES and share < OVERLAP_MAX:
                hits.append((b.block_idx, switches, share, waits))
                break
    if not hits:
        return None
    _, switches, share, waits = hits[0]
    return Finding(
        "no-double-buffering",
        f"{len(hits)} of {len(result.blocks)} blocks alternate MTE2 and V without overlap "
        f"(block {hits[0][0]}: {switches} switches, {share:.0%} overlap, MTE2 waited {waits}x "
        "for V to free a buffer); use depth-2 queues: pipe.InitBuffer(q, 2, bytes)",
    )


def findings(result: LaunchResult) -> list[Finding]:
    """Every rule that fires for ``result`` (see module docstring)."""
    out: list[Finding] = []
    r = mean_ratios(result)
    if r["MTE2"] >= MTE2_BOUND and r["V"] <= IDLE_UNIT and r["M"] <= IDLE_UNIT:
        out.append(
            Finding(
                "mte2-bound",
                f"MTE2 busy {r['MTE2']:.0%} of the core time while V {r['V']:.0%} and "
                f"M {r['M']:.0%}: waiting for GM; copy bigger tiles per DataCopy or read GM "
                "fewer times",
            )
        )
    others = max(v for p, v in r.items() if p != "S")
    if r["S"] >= SCALAR_BOUND and r["S"] > others:
        out.append(
            Finding(
                "scalar-bound",
                f"the scalar unit is busy {r['S']:.0%} of the core time (next pipe "
                f"{others:.0%}): scalar loops or GetValue/SetValue dominate; vectorise them",
            )
        )
    if len(result.blocks) > 1:
        cycles = [b.cycles for b in result.blocks]
        mean = sum(cycles) / len(cycles)
        slow = max(result.blocks, key=lambda b: b.cycles)
        if mean and slow.cycles >= UNBALANCED * mean:
            out.append(
                Finding(
                    "unbalanced-blocks",
                    f"block {slow.block_idx} takes {slow.cycles} cycles, "
                    f"{slow.cycles / mean:.2f}x the mean {mean:.0f} (min {min(cycles)}): "
                    "split the work evenly over blocks",
                )
            )
    nodb = _no_double_buffering(result)
    if nodb:
        out.append(nodb)
    wait = _cross_core_wait(result)
    if wait:
        out.append(wait)
    return out


def _cross_core_wait(result: LaunchResult) -> Finding | None:
    shares: dict[str, list[float]] = {}
    for b in result.blocks:
        for sb in b.sub_blocks:
            if sb.cycles:
                shares.setdefault(sb.name, []).append(sb.cross_core_wait / sb.cycles)
    mean = {u: sum(v) / len(v) for u, v in shares.items()}
    waiting = {u: m for u, m in mean.items() if m >= CROSS_CORE_WAIT}
    if not waiting:
        return None
    worst = max(waiting, key=lambda u: waiting[u])
    other = "AIVs" if worst == "aic" else "AIC"
    listed = ", ".join(f"{u} {m:.0%}" for u, m in sorted(mean.items()))
    return Finding(
        "cross-core-wait",
        f"{worst} stalls {waiting[worst]:.0%} of its cycles in CrossCoreWaitFlag for the "
        f"{other} (stalled share per unit: {listed}): the cube and vector sides wait on each "
        "other's GM hand-offs; give each side more work per flag (bigger tiles) or "
        "double-buffer the workspace so one side works while the other hands over",
    )
