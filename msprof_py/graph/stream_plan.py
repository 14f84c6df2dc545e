"""Stream planning: independent branches of a compiled graph on parallel streams (torch-free).

:func:`plan_streams` follows the pass chain of GE's stream allocator over the launch list
(kernels in launch order; dependencies are the value flow of
:func:`~msprof_py.graph.dataflow.dependencies`: a kernel runs after the last kernel that wrote
a value it reads, through views, after the readers of storage it overwrites, and after the
previous kernel of its own node):

1. **AssignByLabel**: kernels whose nodes carry a stream label (``attrs["_stream_label"]``, GE's
   attribute) share one stream per label.
2. **IndependentStream**: communication kernels (HCCL: ``HcomAllReduce`` ...) go on a stream of
   their own, never shared with compute.
3. **AssignByDependency**: every other kernel, in launch order, continues the stream of its first
   predecessor (in input order) that is still the last kernel of its stream, i.e. the kernel is
   that predecessor's first successor on it; a kernel with no such predecessor (a source, or a
   second branch leaving a fork) opens a new stream.
4. **AllReduceParallelPass** (GE's ``hcom_parallel``; on by default): a successor of an
   all-reduce does not continue a compute stream; all such successors share one new stream, so
   the work that consumes the reduced gradients does not hold the main stream (and the
   backward kernels launched after it) behind the communication.
5. **OptimizeIneffectiveMultiStream**: a compute stream whose kernels are each ordered by
   dependencies with every kernel of an earlier compute stream never runs in parallel with it;
   it is merged into that stream (no parallelism is lost, events are saved).

Then the stream count is capped at ``max_streams`` (GE caps streams per model): each extra
compute stream, in order of first kernel, is folded onto the kept compute stream it has the
fewest unordered kernel pairs with (the least parallelism lost; ties to the lower stream), the
communication stream staying separate. Streams are numbered by first kernel.

**Events.** For every dependency on another stream a wait is inserted (GE's send/recv events),
then pruned: processing each kernel's cross-stream predecessors from the latest down, a wait is
dropped when the predecessor has already finished by stream order and the waits kept so far
(transitive reduction), so the kept waits are minimal. ``waits`` hold launch indices of earlier
kernels.

**One stream.** Dynamic-shape graphs get one stream (GE's default without
``ENABLE_DYNAMIC_SHAPE_MULTI_STREAM``), as does ``single_stream=True`` (GE's
``SINGLE_STREAM_ENABLE``) or ``max_streams=1``.

:func:`schedule` computes when each kernel of a plan would run if every stream had the chip to
itself (no core contention): each stream serial, waits honoured.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from msprof_py.graph.dataflow import ancestors, dependencies, is_all_reduce, is_communication
from msprof_py.graph.ir import Graph, GraphKernel

#: the node attribute naming a user-chosen stream (GE's ``_stream_label``)
STREAM_LABEL_ATTR = "_stream_label"


@dataclass(frozen=True, slots=True)
class StreamPlan:
    """Kernels with their stream and cross-stream waits set; how many streams and events.

    ``events`` counts the waits kept, ``inserted_events`` the waits before pruning;
    ``merged_streams`` the streams OptimizeIneffectiveMultiStream merged away and
    ``folded_streams`` those the stream cap folded; ``comm_stream`` is the HCCL stream (None
    without communication); ``reason`` says why the plan is single-stream ("" otherwise).
    """

    kernels: tuple[GraphKernel, ...]
    streams: int
    events: int
    inserted_events: int = 0
    merged_streams: int = 0
    folded_streams: int = 0
    comm_stream: int | None = None
    reason: str = ""


def _label(graph: Graph, kernel: GraphKernel) -> str | None:
    for member in kernel.members:
        try:
            node = graph.node(member)
        except KeyError:
            continue
        label = node.attrs.get(STREAM_LABEL_ATTR)
        if label is not None:
            return str(label)
    return None


def _cross_waits(streams: Sequence[int], deps: Sequence[tuple[int, ...]]) -> list[list[int]]:
    return [[i for i in deps[j] if streams[i] != streams[j]] for j in range(len(streams))]


def _unordered_pairs(a: list[int], b: list[int], anc: Sequence[int]) -> int:
    """Pairs of kernels, one from each list, that no dependency orders."""
    mask_a = sum(1 << i for i in a)
    mask_b = sum(1 << i for i in b)
    count = 0
    for j in a:
        below = mask_b & ((1 << j) - 1)
        count += (below & ~anc[j]).bit_count()
    for j in b:
        below = mask_a & ((1 << j) - 1)
        count += (below & ~anc[j]).bit_count()
    return count


def _members(streams: Sequence[int]) -> dict[int, list[int]]:
    result: dict[int, list[int]] = {}
    for j, s in enumerate(streams):
        result.setdefault(s, []).append(j)
    return result


def _assign(
    graph: Graph,
    kernels: Sequence[GraphKernel],
    deps: Sequence[tuple[int, ...]],
    *,
    allreduce_parallel: bool,
) -> tuple[list[int], set[int], int | None]:
    """Passes 1-4: logical streams; returns streams, the fixed (label, comm) streams and the
    communication stream."""
    n = len(kernels)
    streams = [-1] * n
    next_id = 0
    fixed: set[int] = set()
    by_label: dict[str, int] = {}
    for j, kernel in enumerate(kernels):  # AssignByLabel
        label = _label(graph, kernel)
        if label is not None:
            if label not in by_label:
                by_label[label] = next_id
                fixed.add(next_id)
                next_id += 1
            streams[j] = by_label[label]
    comm: int | None = None
    for j, kernel in enumerate(kernels):  # IndependentStream
        if streams[j] < 0 and is_communication(kernel):
            if comm is None:
                comm = next_id
                fixed.add(comm)
                next_id += 1
            streams[j] = comm
    tail: dict[int, int] = {}
    post: int | None = None  # the stream of all-reduce successors
    for j in range(n):
        if streams[j] >= 0:
            continue
        chosen: int | None = None
        if allreduce_parallel and any(is_all_reduce(kernels[p]) for p in deps[j]):
            if post is None:  # AllReduceParallelPass
                post = next_id
                next_id += 1
            chosen = post
        else:  # AssignByDependency
            for p in deps[j]:
                s = streams[p]
                if s not in fixed and tail.get(s) == p:
                    chosen = s
                    break
        if chosen is None:
            chosen = next_id
            next_id += 1
        streams[j] = chosen
        tail[chosen] = j
    return streams, fixed, comm


def _merge_ineffective(streams: list[int], deps: Sequence[tuple[int, ...]], fixed: set[int]) -> int:
    """Pass 5, in place: merge compute streams whose kernels are all ordered with an earlier
    compute stream's. Returns how many streams were merged away."""
    anc = ancestors(streams, _cross_waits(streams, deps))
    merged = 0
    order = list(_members(streams))
    kept: list[int] = []
    for t in order:
        if t in fixed:
            continue
        members = _members(streams)
        target = next((s for s in kept if _unordered_pairs(members[s], members[t], anc) == 0), None)
        if target is None:
            kept.append(t)
            continue
        # every pair was ordered already: the merge adds no edge, ``anc`` stays valid
        for j in members[t]:
            streams[j] = target
        merged += 1
    return merged


def _fold(
    streams: list[int], deps: Sequence[tuple[int, ...]], comm: int | None, max_streams: int
) -> int:
    """The stream cap, in place: fold extra compute streams onto kept ones. Returns how many
    streams were folded."""
    order = list(_members(streams))
    compute = [s for s in order if s != comm]
    room = max(1, max_streams - (1 if comm is not None else 0))  # max_streams >= 2 here
    kept, extra = compute[:room], compute[room:]
    for t in extra:
        anc = ancestors(streams, _cross_waits(streams, deps))
        members = _members(streams)
        target = min(kept, key=lambda s: (_unordered_pairs(members[s], members[t], anc), s))
        for j in members[t]:
            streams[j] = target
    return len(extra)


def _prune(
    streams: Sequence[int], deps: Sequence[tuple[int, ...]]
) -> tuple[list[tuple[int, ...]], int]:
    """Insert a wait per cross-stream dependency, keep the minimal set. Returns the kept waits
    and how many were inserted."""
    tail: dict[int, int] = {}
    anc: list[int] = []
    kept: list[tuple[int, ...]] = []
    inserted = 0
    for j, s in enumerate(streams):
        mask = 0
        prev = tail.get(s)
        if prev is not None:
            mask = anc[prev] | (1 << prev)
        cross = sorted({i for i in deps[j] if streams[i] != s}, reverse=True)
        inserted += len(cross)
        waits = []
        for i in cross:
            if mask >> i & 1:
                continue
            waits.append(i)
            mask |= anc[i] | (1 << i)
        anc.append(mask)
        kept.append(tuple(sorted(waits)))
        tail[s] = j
    return kept, inserted


def _single(kernels: Sequence[GraphKernel], reason: str) -> StreamPlan:
    out = tuple(dataclasses.replace(k, stream=0, waits=()) for k in kernels)
    return StreamPlan(out, 1 if out else 0, 0, reason=reason)


def plan_streams(
    graph: Graph,
    kernels: Sequence[GraphKernel],
    *,
    max_streams: int = 8,
    single_stream: bool = False,
    allreduce_parallel: bool = True,
) -> StreamPlan:
    """Assign ``kernels`` (in launch order) to streams (at most ``max_streams``) and set the
    cross-stream waits, as GE's stream allocator does (see the module docstring).

    ``single_stream`` forces one stream (GE's ``SINGLE_STREAM_ENABLE``); a dynamic-shape graph
    always gets one. ``allreduce_parallel`` is GE's ``hcom_parallel`` (successors of an
    all-reduce on a stream of their own).
    """
    if max_streams < 1:
        raise ValueError(f"max_streams must be >= 1, got {max_streams}")
    if single_stream:
        return _single(kernels, "single_stream")
    if graph.dynamic:
        return _single(kernels, "dynamic shapes: one stream")
    if max_streams == 1:
        return _single(kernels, "max_streams=1")
    if not kernels:
        return StreamPlan((), 0, 0)
    deps = dependencies(graph, kernels)
    streams, fixed, comm = _assign(graph, kernels, deps, allreduce_parallel=allreduce_parallel)
    merged = _merge_ineffective(streams, deps, fixed)
    folded = 0
    if len(set(streams)) > max_streams:
        folded = _fold(streams, deps, comm, max_streams)
    renumber: dict[int, int] = {}
    for s in streams:
        renumber.setdefault(s, len(renumber))
    streams = [renumber[s] for s in streams]
    waits, inserted = _prune(streams, deps)
    out = tuple(
        dataclasses.replace(k, stream=s, waits=w)
        for k, s, w in zip(kernels, streams, waits, strict=True)
    )
    return StreamPlan(
        out,
        len(renumber),
        sum(len(w) for w in waits),
        inserted_events=inserted,
        merged_streams=merged,
        folded_streams=folded,
        comm_stream=renumber.get(comm) if comm is not None else None,
    )


def schedule(plan: StreamPlan, launch_ns: int = 0) -> list[tuple[int, int]]:
    """``(start, end)`` in ns of each kernel of ``plan`` when all are launched at ``launch_ns``
    and nothing contends for cores: each stream runs its kernels in order, a kernel starts
    after the kernels it waits for end, and takes ``cost.duration_ns``."""
    stream_free: dict[int, int] = {}
    times: list[tuple[int, int]] = []
    for kernel in plan.kernels:
        start = max(launch_ns, stream_free.get(kernel.stream, launch_ns))
        for i in kernel.waits:
            start = max(start, times[i][1])
        end = start + kernel.cost.duration_ns
        times.append((start, end))
        stream_free[kernel.stream] = end
    return times
