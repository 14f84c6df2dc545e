"""Cycle costs of kernel instructions: data moves, vector repeats, cube fractals, scalar work.

Data moves: bandwidth depends on how many bytes one instruction moves (small moves are
latency-bound). Each path has a table of (KiB per instruction, GiB/s) points; between points
the bandwidth is interpolated linearly in the size, beyond the last point it stays at the last
value, and below the first point the move costs what the first point costs (a latency floor).
Bytes per cycle = GiB/s x 2**30 / 1.8e9: the tables were measured at 1800 MHz, so they are
kept in cycles and the same cycle counts are used on every chip [U for 910A / 310P].

Source of every table: the measured Ascend 910B1 bandwidth tables that ship with msKPP (the
official Ascend kernel performance predictor, its 910B resource data); its loader reads the
first column ("Num Bursts") as KiB per instruction and the second as GiB/s. Points below are a
subset of those rows, rounded to 0.1 GiB/s [V as published measurements; the subset is ours].
Headline figures: GM->L1 9.9 GiB/s for 1 KiB, 147.4 for 32 KiB, 261-262 from 256 KiB on;
GM->UB 7.3 for 1 KiB, about 77-78.5 from 24 KiB on (one core).

Vector: one repeat processes 256 bytes (128 fp16 or 64 fp32 lanes); simple ops (add, mul, max,
adds, muls, duplicate, cast...) issue one repeat per cycle; exp, ln, div, sqrt, reciprocal take
two cycles per repeat. Source: msKPP's 910B vector tables saturate at ~128 fp16 ops/cycle for
vadd [V] and ~60-66 fp16 ops/cycle for vexp and vdiv [V]; ln, sqrt, reciprocal [U] (assumed like
exp). A reduction (ReduceMax / ReduceSum) is modelled as passes of whole-register reductions,
each repeat folding 256 B to one element, until one element is left [U: modelled, not measured].

Cube: one (m0, k0, n0) fractal per cycle (16x16x16 for fp16/bf16, 16x32x16 for int8: CANN
platform config DtypeMKN [V]); msKPP's mmad table peaks at 8192 ops/cycle = 2x16x16x16 [V].
No start-up latency is charged on V and M (msKPP's smallest rows show 2-3 cycles; ignored [U]).

Scalar: each instruction the scalar unit dispatches takes it 1 cycle; a scalar read or write of
a local tensor (GetValue / SetValue) costs ``SCALAR_CYCLES`` [U]; ``ScalarWork(n)`` charges n
cycles of user scalar code; GetBlockIdx is free (a register read).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

#: the clock msKPP's tables were measured at (its loader fixes 1800 MHz)
TABLE_CLOCK_HZ = 1.8e9
_GIB = 2**30

#: cycles of the scalar unit to dispatch one pipe instruction [U]
ISSUE_CYCLES = 1
#: cycles of one scalar access of a local tensor (GetValue, SetValue) [U]
SCALAR_CYCLES = 2


@dataclass(frozen=True)
class BandwidthTable:
    """Bandwidth of one data path against the bytes one instruction moves."""

    name: str
    #: (KiB per instruction, GiB/s), sizes ascending
    points: tuple[tuple[float, float], ...]

    def bytes_per_cycle(self, nbytes: int) -> float:
        """Interpolated bytes per cycle for an instruction moving ``nbytes``."""
        kib = nbytes / 1024
        pts = self.points
        if kib <= pts[0][0]:
            gib = pts[0][1]
        elif kib >= pts[-1][0]:
            gib = pts[-1][1]
        else:
            gib = pts[-1][1]
            for (x0, y0), (x1, y1) in itertools.pairwise(pts):
                if x0 <= kib <= x1:
                    gib = y0 + (y1 - y0) * (kib - x0) / (x1 - x0)
                    break
        return gib * _GIB / TABLE_CLOCK_HZ

    def cycles(self, nbytes: int) -> int:
        """Cycles to move ``nbytes`` in one instruction (at least the first point's cost)."""
        if nbytes <= 0:
            return 0
        floor_bytes = int(self.points[0][0] * 1024)
        if nbytes < floor_bytes:
            return self.cycles(floor_bytes)
        return math.ceil(nbytes / self.bytes_per_cycle(nbytes))


GM_TO_UB = BandwidthTable(
    "GM->UB",
    ((1, 7.3), (2, 13.5), (4, 23.6), (8, 42.7), (16, 68.0), (24, 77.1), (32, 77.2), (128, 78.5)),
)
GM_TO_L1 = BandwidthTable(
    "GM->L1",
    (
        (1, 9.9), (2, 17.9), (4, 29.3), (8, 58.0), (16, 93.2), (32, 147.4), (48, 166.2),
        (64, 176.3), (96, 214.5), (128, 232.5), (192, 248.0), (256, 261.4), (512, 261.9),
    ),
)  # fmt: skip
UB_TO_GM = BandwidthTable(
    "UB->GM", ((1, 11.4), (2, 22.1), (4, 37.9), (8, 57.8), (16, 86.8), (32, 108.4), (64, 110.7))
)
L0C_TO_GM = BandwidthTable(
    "L0C->GM", ((1, 20.8), (2, 41.9), (4, 85.8), (8, 161.2), (16, 203.2), (32, 201.3))
)
L1_TO_L0A = BandwidthTable(
    "L1->L0A", ((1, 286.9), (2, 349.6), (4, 389.9), (8, 414.1), (16, 427.3), (32, 434.0))
)
L1_TO_L0B = BandwidthTable(
    "L1->L0B", ((1, 174.1), (2, 194.7), (4, 206.9), (8, 213.5), (16, 217.0), (32, 218.8))
)
UB_TO_UB = BandwidthTable("UB->UB", ((1, 436.7), (8, 440.7)))

#: cycles per 256 B repeat of each vector op (see module docstring); ops not listed cost 1
VECTOR_CYCLES_PER_REPEAT: dict[str, int] = {
    "Exp": 2,
    "Ln": 2,
    "Div": 2,
    "Sqrt": 2,
    "Reciprocal": 2,
}


def repeats(count: int, itemsize: int, repeat_bytes: int = 256) -> int:
    """Vector repeats to process ``count`` elements of ``itemsize`` bytes."""
    return math.ceil(count * itemsize / repeat_bytes) if count > 0 else 0


def vector_cycles(op: str, count: int, itemsize: int, repeat_bytes: int = 256) -> int:
    """Cycles of an elementwise vector op over ``count`` elements."""
    return repeats(count, itemsize, repeat_bytes) * VECTOR_CYCLES_PER_REPEAT.get(op, 1)


def reduce_cycles(count: int, itemsize: int, repeat_bytes: int = 256) -> int:
    """Cycles of a full reduction: passes of repeats, each folding 256 B to one element."""
    total = 0
    while count > 1:
        n = repeats(count, itemsize, repeat_bytes)
        total += n
        count = n
    return max(total, 1)


def mmad_cycles(m: int, k: int, n: int, fractal: tuple[int, int, int]) -> int:
    """Cube cycles of an (m, k) x (k, n) Mmad: one (m0, k0, n0) fractal per cycle."""
    m0, k0, n0 = fractal
    return math.ceil(m / m0) * math.ceil(k / k0) * math.ceil(n / n0)
