"""What a launch returns: per block, per core and per pipe cycles, the instruction list, outputs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from msprof_py.kernels.chip import Chip
from msprof_py.kernels.timeline import PIPES, Instr


@dataclass(frozen=True)
class InstrRecord:
    """One instruction in launch time (cycles from the kernel's start)."""

    block: int
    core: int
    pipe: str
    name: str
    start: int
    end: int
    nbytes: int
    detail: str
    #: the sub-core of a split mix block ("aic", "aiv0", "aiv1"); "" on a single-core block
    unit: str = ""
    #: the kernel source line that issued it ("kernel.py:42")
    source: str = ""

    @property
    def cycles(self) -> int:
        """Cycles the instruction took on its pipe."""
        return self.end - self.start


@dataclass
class SubBlockResult:
    """One sub-core of a split mix block: the AIC or one AIV, with its own pipes."""

    #: "aic" or "aiv"
    unit: str
    #: 0 for the AIC, 0 / 1 for the AIVs
    sub_block_idx: int
    #: cycles from the block's start to this sub-core's last pipe finishing
    cycles: int
    pipe_busy: dict[str, int]
    instructions: list[Instr] = field(repr=False)
    #: cycles this unit stood idle (every pipe drained) in CrossCoreWaitFlag
    cross_core_wait: int = 0

    @property
    def name(self) -> str:
        """``aic``, ``aiv0`` or ``aiv1``."""
        return "aic" if self.unit == "aic" else f"aiv{self.sub_block_idx}"

    def ratio(self, pipe: str) -> float:
        """Busy share of ``pipe`` over this sub-core's cycles (msprof op's *_ratio)."""
        return self.pipe_busy.get(pipe, 0) / self.cycles if self.cycles else 0.0


@dataclass
class BlockResult:
    """One block: the core it ran on, when, and its pipes' busy cycles (summed over its
    sub-cores for a split mix block)."""

    block_idx: int
    core: int
    start: int
    end: int
    pipe_busy: dict[str, int]
    instructions: list[Instr] = field(repr=False)
    implicit_waits: int = 0
    #: the AIC and the AIVs of a split mix block (``kernel_type="mix_aic_1_2"``); else empty
    sub_blocks: list[SubBlockResult] = field(default_factory=list, repr=False)

    @property
    def cycles(self) -> int:
        """Cycles from the block's start to its last pipe finishing."""
        return self.end - self.start

    def ratio(self, pipe: str) -> float:
        """Busy share of ``pipe`` over the block (msprof op's *_ratio: unit / core cycles);
        for a split mix block, the busiest sub-core's share of the block's cycles."""
        if not self.cycles:
            return 0.0
        if self.sub_blocks:
            return max(sb.pipe_busy.get(pipe, 0) for sb in self.sub_blocks) / self.cycles
        return self.pipe_busy.get(pipe, 0) / self.cycles

    def unit_of(self) -> dict[int, str]:
        """id(instruction) -> sub-core name, for a split mix block's instructions."""
        return {id(i): sb.name for sb in self.sub_blocks for i in sb.instructions}


@dataclass
class CoreResult:
    """One physical core: the blocks it ran (waves) and its pipes' busy cycles (for split mix
    blocks, per pipe the busiest of the block's AIC / AIVs)."""

    core: int
    blocks: list[int]
    pipe_busy: dict[str, int]
    finish: int


@dataclass
class LaunchResult:
    """The outcome of :func:`msprof_py.kernels.launch`."""

    name: str
    chip: Chip = field(repr=False)
    block_dim: int
    #: "aiv" (vector cores only) or "mix" (blocks use the cube: cube cores, with their vector
    #: cores on split chips); on coupled chips every block runs on an AI Core ("aicore")
    core_type: str
    #: physical cores the blocks were spread over
    cores: int
    waves: int
    total_cycles: int
    blocks: list[BlockResult] = field(repr=False)
    core_results: list[CoreResult] = field(repr=False)
    #: kernel arguments that were arrays, by parameter name (GM is written in place)
    outputs: Mapping[str, np.ndarray] = field(repr=False, default_factory=dict)

    @property
    def split_mix(self) -> bool:
        """True when the blocks ran as AIC + 2 AIV sub-cores (``kernel_type="mix_aic_1_2"``)."""
        return any(b.sub_blocks for b in self.blocks)

    @property
    def duration_ns(self) -> float:
        """Kernel duration: the last core's finish at the chip clock."""
        return self.chip.cycles_to_ns(self.total_cycles)

    @property
    def duration_us(self) -> float:
        """Kernel duration in microseconds."""
        return self.duration_ns / 1000

    @property
    def implicit_waits(self) -> int:
        """Waits automatic synchronisation inserted (0 for strict Ascend C kernels)."""
        return sum(b.implicit_waits for b in self.blocks)

    def pipe_busy(self) -> dict[str, int]:
        """Busy cycles per pipe summed over blocks."""
        out = dict.fromkeys((p.value for p in PIPES), 0)
        for b in self.blocks:
            for pipe, cycles in b.pipe_busy.items():
                out[pipe] += cycles
        return out

    def instructions(self, *, syncs: bool = False) -> list[InstrRecord]:
        """Every block's instructions in launch time, ordered by start (flags and queue
        events, which take no cycles, only with ``syncs``)."""
        rows = []
        for b in self.blocks:
            units = b.unit_of()
            rows += [
                InstrRecord(
                    b.block_idx,
                    b.core,
                    i.pipe.value,
                    i.name,
                    b.start + i.start,
                    b.start + i.end,
                    i.nbytes,
                    i.detail,
                    units.get(id(i), ""),
                    i.source,
                )
                for i in b.instructions
                if syncs or i.cycles
            ]
        rows.sort(key=lambda r: (r.start, r.block, r.unit, r.pipe))
        return rows
