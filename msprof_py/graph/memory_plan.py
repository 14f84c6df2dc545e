"""Static memory planning: a compiled graph's intermediates in one workspace (torch-free).

This first version places every intermediate at its own offset (no reuse).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from msprof_py.graph.ir import Graph, GraphKernel, ValueRef


@dataclass(frozen=True, slots=True)
class Block:
    """Where one intermediate lives: workspace offset and size (bytes), and the launch-list
    indices of the kernel that writes it and the last kernel that reads it."""

    value: ValueRef
    offset: int
    size: int
    first: int
    last: int


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """The workspace of one graph: its blocks, its size with reuse, and the size without."""

    blocks: tuple[Block, ...]
    workspace_bytes: int
    no_reuse_bytes: int

    @property
    def reuse_ratio(self) -> float:
        """Share of the no-reuse size that reuse saves (0 when nothing is planned)."""
        if self.no_reuse_bytes <= 0:
            return 0.0
        return 1.0 - self.workspace_bytes / self.no_reuse_bytes


def _align(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def plan_memory(
    graph: Graph, kernels: Sequence[GraphKernel], *, alignment: int = 512
) -> MemoryPlan:
    """Assign the intermediates ``kernels`` write (values that are not graph outputs) to
    workspace offsets."""
    blocks: list[Block] = []
    offset = 0
    last_use: dict[ValueRef, int] = {}
    for i, kernel in enumerate(kernels):
        for ref in kernel.inputs:
            last_use[ref] = i
    for i, kernel in enumerate(kernels):
        for ref in kernel.outputs:
            if graph.is_output(ref):
                continue
            size = _align(graph.spec(ref).nbytes, alignment)
            blocks.append(Block(ref, offset, size, i, last_use.get(ref, i)))
            offset += size
    return MemoryPlan(tuple(blocks), offset, offset)
