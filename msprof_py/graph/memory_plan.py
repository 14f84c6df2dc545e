"""Static memory planning: a compiled graph's intermediates in one workspace (torch-free).

GE plans a static graph's memory once, at compile time, for the whole graph
(``BlockMemAssigner::AssignMemoryWithReuse``): every intermediate gets an offset in one
workspace, and values that are never live at the same time share bytes. :func:`plan_memory`
does the same over the launch list.

**Intermediates.** Every value a kernel writes, produced by an op node (inputs, parameters and
constants live at fixed addresses outside the workspace) and not leaving the graph, is an
intermediate. A value leaves the graph when it is a graph output or the base of a view that is
one. Reads and writes through views count on the view chain's base (a view launches no kernel
and keeps its base alive).

**Lifetimes.** An intermediate lives from the first kernel that writes it to the last kernel
that reads it (launch indices ``first`` and ``last``; a value never read lives during its
writer only). A node launched as several kernels is one unit: its inputs stay live until its
last kernel, its outputs from its first. Sizes are rounded up to ``alignment`` (GE aligns
blocks to 512 bytes).

**Streams.** When the kernels carry a stream plan (stream and waits set by
:func:`~msprof_py.graph.stream_plan.plan_streams`; plan streams first, then memory, as GE
does), two values may share bytes only if every kernel using one has finished, by stream order
and waits, before the other's first writer starts; launch order alone is not enough when the
kernels run on different streams. With every kernel on one stream this is exactly "the
lifetimes ``[first, last]`` do not overlap".

**No reuse** (GE's rules). These values get bytes of their own for the whole graph:

* outputs of communication kernels (HCCL; ``HcomAllReduce`` ...): HCCL needs them at fixed,
  continuous addresses while the collective runs on its own stream;
* atomic-clean outputs: kernels that accumulate into a zeroed output with atomic adds (GE
  clears them with an ``AtomicAddrClean``/``MemSet`` task before the kernel). The criterion is
  the op type: :data:`ATOMIC_OP_TYPES` (scatter/segment accumulations, the embedding
  gradient), replaceable with the ``atomic_op_types`` keyword;
* fixed-address values (parameter and constant nodes) are never in the workspace at all.

**Assignment** (greedy by size, best fit, as GE sorts blocks by size): no-reuse blocks first,
at the bottom of the workspace in launch order; then the reusable values, largest first (ties:
earlier ``first``, then value name), each placed in the smallest gap between the already placed
blocks it conflicts with that fits it (lowest offset on ties), else above them. The result is
deterministic; ``workspace_bytes`` (the highest ``offset + size``) is compared with
``no_reuse_bytes`` (every intermediate at its own offset) and with ``live_peak_bytes``, the
most bytes live at one launch index, a lower bound for any single-stream plan.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from msprof_py.graph.dataflow import ancestors, base_value, is_communication, member_groups
from msprof_py.graph.ir import Graph, GraphKernel, NodeKind, ValueRef

#: Op types whose kernels accumulate into their output with atomic adds, so GE zeroes the
#: output first (an atomic-clean block, never reused).
ATOMIC_OP_TYPES = frozenset(
    {
        "EmbeddingDenseGrad",
        "UnsortedSegmentSum",
        "ScatterAdd",
        "ScatterNdAdd",
        "IndexAdd",
        "IndexPutWithAccumulate",
        "AtomicAddrClean",
    }
)

REASON_COMMUNICATION = "communication output: HCCL keeps its own memory"
REASON_ATOMIC = "atomic-clean output: zeroed before an accumulating kernel"


@dataclass(frozen=True, slots=True)
class Block:
    """Where one intermediate lives: workspace offset and size (bytes), and the launch-list
    indices of the kernel that writes it and the last kernel that reads it. ``reason`` says
    why the block is never shared ("" for a reusable block)."""

    value: ValueRef
    offset: int
    size: int
    first: int
    last: int
    reason: str = ""

    @property
    def end(self) -> int:
        """One past the block's last byte."""
        return self.offset + self.size


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """The workspace of one graph: its blocks, its size with reuse, and the size without.

    ``live_peak_bytes`` is the most bytes live at one launch index (no plan of a single-stream
    launch list can be smaller); ``reused_blocks`` counts blocks that share bytes with a
    block of an earlier value; ``no_reuse`` lists the values kept out of reuse and why.
    """

    blocks: tuple[Block, ...]
    workspace_bytes: int
    no_reuse_bytes: int
    live_peak_bytes: int = 0
    reused_blocks: int = 0
    no_reuse: tuple[tuple[ValueRef, str], ...] = ()

    @property
    def reuse_ratio(self) -> float:
        """Share of the no-reuse size that reuse saves (0 when nothing is planned)."""
        if self.no_reuse_bytes <= 0:
            return 0.0
        return 1.0 - self.workspace_bytes / self.no_reuse_bytes

    def block(self, value: ValueRef) -> Block:
        """The block of ``value``."""
        for b in self.blocks:
            if b.value == value:
                return b
        raise KeyError(value)


def _align(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


@dataclass(slots=True)
class _Value:
    ref: ValueRef
    size: int
    first: int
    users: set[int]
    reason: str

    @property
    def last(self) -> int:
        return max(self.users)


def _escaping(graph: Graph) -> set[ValueRef]:
    return {base_value(graph, r) for r in graph.outputs}


def _values(
    graph: Graph,
    kernels: Sequence[GraphKernel],
    alignment: int,
    atomic_op_types: Collection[str],
) -> list[_Value]:
    """The intermediates in order of first write, with their users and no-reuse reasons."""
    escaping = _escaping(graph)
    groups = member_groups(kernels)
    found: dict[ValueRef, _Value] = {}
    for i, kernel in enumerate(kernels):
        lo, hi = groups[i]
        for ref in kernel.outputs:
            base = base_value(graph, ref)
            if base in escaping or graph.node(base.node).kind is not NodeKind.OP:
                continue
            value = found.get(base)
            if value is None:
                size = _align(graph.spec(base).nbytes, alignment)
                value = found[base] = _Value(base, size, lo, set(), "")
            value.users.update(range(lo, i + 1))
            if is_communication(kernel):
                value.reason = value.reason or REASON_COMMUNICATION
            elif kernel.op_type in atomic_op_types:
                value.reason = value.reason or REASON_ATOMIC
        for ref in kernel.inputs:
            value = found.get(base_value(graph, ref))
            if value is not None:
                value.users.update(range(i, hi + 1))
    return list(found.values())


def _live_peak(values: Sequence[_Value], count: int) -> int:
    delta = [0] * (count + 1)
    for v in values:
        first, last = (0, count - 1) if v.reason else (v.first, v.last)
        delta[first] += v.size
        delta[last + 1] -= v.size
    peak = live = 0
    for d in delta:
        live += d
        peak = max(peak, live)
    return peak


def _best_fit(size: int, taken: list[tuple[int, int]]) -> int:
    """The lowest offset of the smallest gap between ``taken`` ranges that holds ``size``,
    else the offset above them all."""
    best: tuple[int, int] | None = None
    cursor = 0
    for start, end in sorted(taken):
        gap = start - cursor
        if gap >= size and (best is None or gap < best[0]):
            best = (gap, cursor)
        cursor = max(cursor, end)
    return cursor if best is None else best[1]


class _Safety:
    """When each value's bytes are free for a new value, per stream.

    Along one stream the kernels that have certainly finished before a kernel starts only grow
    (stream order), so for value ``a`` and stream ``s`` there is a first kernel of ``s`` from
    which every user of ``a`` has finished: ``threshold[a][s]``. A value first written by a
    kernel of ``s`` before that threshold may run while ``a`` is still in use. ``reach[a]`` is
    one past the last such kernel on any stream (``last + 1`` on a single stream).
    """

    def __init__(self, values: Sequence[_Value], kernels: Sequence[GraphKernel]) -> None:
        self.stream = [k.stream for k in kernels]
        anc = ancestors(self.stream, [k.waits for k in kernels])
        by_stream: dict[int, list[int]] = {}
        for j, s in enumerate(self.stream):
            by_stream.setdefault(s, []).append(j)
        self.threshold: dict[ValueRef, dict[int, int]] = {}
        self.reach: dict[ValueRef, int] = {}
        for v in values:
            mask = sum(1 << u for u in v.users)
            last = v.last
            per: dict[int, int] = {}
            reach = last + 1
            for s, indices in by_stream.items():
                lo = bisect.bisect_right(indices, last)
                hi = len(indices)
                while lo < hi:  # first kernel of s after ``last`` that sees ``v`` finished
                    mid = (lo + hi) // 2
                    if mask & ~anc[indices[mid]]:
                        lo = mid + 1
                    else:
                        hi = mid
                per[s] = indices[lo] if lo < len(indices) else len(kernels)
                if lo > 0 and indices[lo - 1] > last:
                    reach = max(reach, indices[lo - 1] + 1)
            self.threshold[v.ref] = per
            self.reach[v.ref] = reach

    def conflict(self, a: _Value, b: _Value) -> bool:
        """``a`` and ``b`` may be in use at the same time."""
        if a.first > b.first:
            a, b = b, a
        if b.first > self.reach[a.ref] - 1:
            return False
        return b.first < self.threshold[a.ref][self.stream[b.first]]


def _reused(blocks: Sequence[Block]) -> int:
    """Blocks sharing bytes with a block of a value written earlier."""
    order = sorted(blocks, key=lambda b: (b.offset, b.first, b.value))
    reused: set[ValueRef] = set()
    for i, b in enumerate(order):
        for o in order[i + 1 :]:
            if o.offset >= b.end:
                break
            if b.size and o.size:
                later = o if (o.first, o.value) > (b.first, b.value) else b
                reused.add(later.value)
    return len(reused)


def plan_memory(
    graph: Graph,
    kernels: Sequence[GraphKernel],
    *,
    alignment: int = 512,
    atomic_op_types: Collection[str] = ATOMIC_OP_TYPES,
) -> MemoryPlan:
    """Assign the intermediates ``kernels`` write (values that are not graph outputs) to
    workspace offsets with reuse by lifetime (see the module docstring).

    ``kernels`` are in launch order; when they carry streams and waits (a stream plan), reuse
    also respects what can run concurrently. ``atomic_op_types`` are the op types whose
    outputs are atomic-clean (never reused).
    """
    if alignment < 1:
        raise ValueError(f"alignment must be >= 1, got {alignment}")
    values = _values(graph, kernels, alignment, atomic_op_types)
    position: dict[ValueRef, int] = {}
    offset = 0
    for v in values:
        if v.reason:
            position[v.ref] = offset
            offset += v.size
    fixed_top = offset
    reusable = sorted((v for v in values if not v.reason), key=lambda v: (-v.size, v.first, v.ref))
    safety = _Safety(reusable, kernels)
    reach = safety.reach
    placed: list[tuple[_Value, int, int, int]] = []  # value, first, reach, offset
    for v in reusable:
        first, end = v.first, reach[v.ref]
        taken = [(0, fixed_top)] if fixed_top else []
        taken += [
            (off, off + u.size)
            for u, u_first, u_end, off in placed
            if u_first < end and first < u_end and safety.conflict(u, v)
        ]
        off = _best_fit(v.size, taken)
        position[v.ref] = off
        placed.append((v, first, end, off))
    blocks = tuple(Block(v.ref, position[v.ref], v.size, v.first, v.last, v.reason) for v in values)
    return MemoryPlan(
        blocks,
        max((b.end for b in blocks), default=0),
        sum(v.size for v in values),
        live_peak_bytes=_live_peak(values, len(kernels)),
        reused_blocks=_reused(blocks),
        no_reuse=tuple((v.ref, v.reason) for v in values if v.reason),
    )
