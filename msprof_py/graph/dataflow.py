"""Value flow between the kernels of a launch list, shared by the memory and stream planners.

Both planners see a compiled graph as GE does after fusion: a launch list of
:class:`~msprof_py.graph.ir.GraphKernel` in launch (topological) order, each reading and writing
values of the :class:`~msprof_py.graph.ir.Graph`. This module answers three questions about it
(torch-free):

* which storage a value lives in (:func:`base_value`): a view node launches no kernel and its
  output aliases its ``view_of`` input, so a read through a chain of views is a read of the
  chain's base;
* which earlier kernels each kernel depends on (:func:`dependencies`): read-after-write on the
  same storage (the kernel reading a value waits for the last kernel that wrote it), plus
  write-after-read and write-after-write for storage written twice (an in-place update), plus
  the kernels of one node launched as several kernels (a convolution backward's two GEMMs),
  which run in launch order;
* which kernels are certain to have finished before another starts on a given stream
  assignment (:func:`ancestors`): stream order (each stream runs its kernels in launch order)
  plus the cross-stream waits.

Communication kernels (:func:`is_communication`) are HCCL tasks: the cost's task type is
``HCCL``, or the op type is GE's collective op type (``HcomAllReduce``, ``HcomAllGather``,
``HcomReduceScatter``, ``HcomBroadcast``, ``HcomSend`` ...; ``Hccl...`` accepted as well).
"""

from __future__ import annotations

from collections.abc import Sequence

from msprof_py.device.records import TaskType
from msprof_py.graph.ir import Graph, GraphKernel, ValueRef

#: op-type prefixes of GE's collective communication ops (``HcomAllReduce`` ...)
COMMUNICATION_PREFIXES = ("Hcom", "Hccl")


def is_communication(kernel: GraphKernel) -> bool:
    """The kernel is a collective (HCCL task): GE gives it its own stream and memory."""
    return kernel.cost.task_type is TaskType.HCCL or kernel.op_type.startswith(
        COMMUNICATION_PREFIXES
    )


def is_all_reduce(kernel: GraphKernel) -> bool:
    """The kernel is an all-reduce (``HcomAllReduce``; any HCCL kernel whose op type or name
    says all-reduce)."""
    if not is_communication(kernel):
        return False
    text = f"{kernel.op_type} {kernel.name}".lower().replace("_", "").replace("-", "")
    return "allreduce" in text


def base_value(graph: Graph, ref: ValueRef) -> ValueRef:
    """The storage ``ref`` aliases: the base at the end of its chain of views."""
    seen: set[ValueRef] = set()
    while True:
        view_of = graph.node(ref.node).view_of
        if view_of is None or ref in seen:
            return ref
        seen.add(ref)
        ref = view_of


def member_groups(kernels: Sequence[GraphKernel]) -> list[tuple[int, int]]:
    """For each kernel, the first and last launch index of the kernels that share a member
    node with it (a node launched as several kernels is one unit for lifetimes)."""
    first_of: dict[str, int] = {}
    last_of: dict[str, int] = {}
    for i, kernel in enumerate(kernels):
        for member in kernel.members:
            first_of.setdefault(member, i)
            last_of[member] = i
    result = []
    for i, kernel in enumerate(kernels):
        lo = min((first_of[m] for m in kernel.members), default=i)
        hi = max((last_of[m] for m in kernel.members), default=i)
        result.append((min(lo, i), max(hi, i)))
    return result


def dependencies(graph: Graph, kernels: Sequence[GraphKernel]) -> list[tuple[int, ...]]:
    """For each kernel, the earlier kernels it must run after, in order of discovery (the
    previous kernel of its own node first, then per input the writer of that input, then the
    write hazards), each once.

    A kernel reading a value a later kernel writes (not a valid launch order) gets no
    dependency for it; the value is then read as the graph received it.
    """
    last_writer: dict[ValueRef, int] = {}
    readers: dict[ValueRef, list[int]] = {}
    last_of_member: dict[str, int] = {}
    result: list[tuple[int, ...]] = []
    for j, kernel in enumerate(kernels):
        deps: dict[int, None] = {}
        for member in kernel.members:
            if member in last_of_member:
                deps[last_of_member[member]] = None
        reads = [base_value(graph, r) for r in kernel.inputs]
        writes = [base_value(graph, r) for r in kernel.outputs]
        for ref in reads:
            if ref in last_writer:
                deps[last_writer[ref]] = None
        for ref in writes:
            if ref in last_writer:
                deps[last_writer[ref]] = None
            for reader in readers.get(ref, ()):
                deps[reader] = None
        deps.pop(j, None)
        result.append(tuple(deps))
        for ref in reads:
            readers.setdefault(ref, []).append(j)
        for ref in writes:
            last_writer[ref] = j
            readers[ref] = []
        for member in kernel.members:
            last_of_member[member] = j
    return result


def ancestors(streams: Sequence[int], waits: Sequence[Sequence[int]]) -> list[int]:
    """Per kernel, a bit set (bit ``i`` = kernel ``i``) of the kernels certain to have finished
    before it starts: the earlier kernels of its stream, the kernels it waits for, and theirs."""
    tail: dict[int, int] = {}
    result: list[int] = []
    for j, stream in enumerate(streams):
        mask = 0
        prev = tail.get(stream)
        if prev is not None:
            mask |= result[prev] | (1 << prev)
        for i in waits[j]:
            if 0 <= i < j:
                mask |= result[i] | (1 << i)
        result.append(mask)
        tail[stream] = j
    return result
