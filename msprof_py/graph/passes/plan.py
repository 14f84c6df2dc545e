"""The working state every pass reads and extends, and the launch list it finally gives.

A pass never rewrites the :class:`~msprof_py.graph.ir.Graph`. Cleanup passes mark nodes as
removed (CSE also aliases the duplicate's values to the original's), fusion passes claim
nodes for a :class:`Group`; :meth:`Plan.kernels` then emits one kernel per group and the eager
kernels of every remaining node, in a topological order of those units.

Value references are looked at *through* views and CSE aliases (:meth:`Plan.resolve`): a view
launches nothing and does not break a chain, and a kernel reads its base.
"""

from __future__ import annotations

import dataclasses
import heapq
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from msprof_py.device.costmodel import KernelCost
from msprof_py.device.records import TaskType
from msprof_py.device.spec import DeviceSpec
from msprof_py.graph.fused_cost import fused_cost
from msprof_py.graph.ir import (
    Graph,
    GraphKernel,
    KernelSpec,
    Node,
    NodeKind,
    PassRecord,
    ValueRef,
    kernel_names,
)

#: ops whose result differs call to call: never merged by CSE, never folded
RANDOM_TARGETS = frozenset(
    {
        "native_dropout",
        "dropout",
        "bernoulli",
        "rand",
        "randn",
        "rand_like",
        "randn_like",
        "randint",
        "randint_like",
        "randperm",
        "normal",
        "uniform",
        "multinomial",
        "exponential",
        "_fused_dropout",
    }
)
#: ops that write one of their inputs (or global state) besides the ATen ``foo_`` names
_MUTATING_TARGETS = frozenset({"copy_", "set_", "resize_", "_foreach_copy", "index_put_"})


def is_mutating(target: str) -> bool:
    """``target`` writes an input in place (``copy_``, ``add_``, any name ending in ``_``)."""
    return target.endswith("_") or target in _MUTATING_TARGETS


def is_view(node: Node) -> bool:
    """The node is a view: it launches nothing and its outputs alias ``view_of``."""
    return node.view_of is not None


@dataclass(slots=True)
class Group:
    """Nodes one fusion pass merged into one kernel.

    ``work`` are the member kernels whose work the fused kernel does (fewer than the members'
    kernels when a pass folds some away, as ConvBN folds the BN); ``cost`` overrides the
    generic :func:`~msprof_py.graph.fused_cost.fused_cost` (FlashAttention has its own tile
    model).
    """

    pass_name: str
    op_type: str
    name: str
    members: tuple[str, ...]
    work: tuple[KernelSpec, ...]
    cost: KernelCost | None = None
    #: inputs the kernel does not read at run time (folded into its weights at compile time)
    folded_inputs: frozenset[ValueRef] = frozenset()


class Plan:
    """What the passes decided so far about one graph."""

    def __init__(self, graph: Graph, spec: DeviceSpec) -> None:
        self.graph = graph
        self.spec = spec
        self.order = {n.name: i for i, n in enumerate(graph.nodes)}
        #: launch names of each node's eager kernels (unique in the graph)
        self.kernel_names = kernel_names(graph)
        #: CSE: a duplicate's value -> the original's
        self.alias: dict[ValueRef, ValueRef] = {}
        #: node -> why it launches nothing ("cse: same as x", "dead", "constant-folded")
        self.removed: dict[str, str] = {}
        #: nodes computed at compile time (their values are constants, like CONST inputs)
        self.folded: set[str] = set()
        self.groups: list[Group] = []
        self.owner: dict[str, int] = {}
        self.records: list[PassRecord] = []
        #: AssignRemovePass: a value -> the parameter its producer writes in place instead
        self.inplace: dict[ValueRef, ValueRef] = {}
        self._users: dict[str, list[Node]] | None = None
        self._ref_users: dict[ValueRef, list[Node]] = {}
        self._out_bases: set[ValueRef] = set()

    # ---- looking through views and aliases -------------------------------------------------

    def resolve(self, ref: ValueRef) -> ValueRef:
        """The value ``ref`` really reads: CSE aliases followed, views followed to their base."""
        seen = 0
        while True:
            ref = self.alias.get(ref, ref)
            node = self.graph.node(ref.node)
            if node.view_of is None or seen > len(self.graph.nodes):
                return ref
            ref = node.view_of
            seen += 1

    def producer(self, ref: ValueRef) -> Node:
        """The node producing the value ``ref`` reads (a non-view node or a graph input)."""
        return self.graph.node(self.resolve(ref).node)

    def arg(self, node: Node, index: int) -> Node | None:
        """The producer of ``node``'s tensor input ``index`` (None if it has fewer)."""
        if index >= len(node.inputs):
            return None
        return self.producer(node.inputs[index])

    def is_const(self, ref: ValueRef) -> bool:
        """``ref`` is known at compile time: a CONST input or the value of a folded node."""
        node = self.producer(ref)
        return node.kind is NodeKind.CONST or node.name in self.folded

    def live(self, node: Node) -> bool:
        """The node is an op that still launches its kernels (not removed, not a view)."""
        return node.is_op and not is_view(node) and node.name not in self.removed

    def live_ops(self) -> list[Node]:
        """The live op nodes, in graph order."""
        return [n for n in self.graph.nodes if self.live(n)]

    def free(self, node: Node | None) -> bool:
        """``node`` is live and no fusion claimed it yet."""
        return node is not None and self.live(node) and node.name not in self.owner

    # ---- consumers (after cleanup) ---------------------------------------------------------

    def refresh(self) -> None:
        """Recompute who reads what (call after cleanup changed the live nodes)."""
        users: dict[str, list[Node]] = {n.name: [] for n in self.graph.nodes}
        ref_users: dict[ValueRef, list[Node]] = {}
        for node in self.live_ops():
            for ref in dict.fromkeys(self.resolve(r) for r in node.inputs):
                if node not in users[ref.node]:
                    users[ref.node].append(node)
                ref_users.setdefault(ref, []).append(node)
        self._users = users
        self._ref_users = ref_users
        self._out_bases = {self.resolve(r) for r in self.graph.outputs}

    def users(self, node: Node | str) -> list[Node]:
        """Live op nodes reading any output of ``node`` (through views), in graph order."""
        if self._users is None:
            self.refresh()
        assert self._users is not None
        return self._users[node if isinstance(node, str) else node.name]

    def ref_users(self, ref: ValueRef) -> list[Node]:
        """Live op nodes reading the value ``ref`` (through views)."""
        if self._users is None:
            self.refresh()
        return self._ref_users.get(self.resolve(ref), [])

    def only_user(self, node: Node) -> Node | None:
        """The single live reader of ``node``'s outputs, or None."""
        found = self.users(node)
        return found[0] if len(found) == 1 else None

    def is_graph_output(self, ref: ValueRef) -> bool:
        """``ref`` (or a view of it) leaves the graph."""
        if self._users is None:
            self.refresh()
        return self.resolve(ref) in self._out_bases

    def outer_readers(self, node: Node, members: Iterable[str]) -> list[Node]:
        """Readers of ``node`` outside ``members``."""
        inside = set(members)
        return [u for u in self.users(node) if u.name not in inside]

    # ---- fusing -----------------------------------------------------------------------------

    def blocker(self, members: Sequence[str]) -> str:
        """Why ``members`` cannot become one kernel ("" if they can): a node already fused or
        removed, an AI CPU member, or a cycle through other kernels."""
        for name in members:
            node = self.graph.node(name)
            if name in self.owner:
                return f"{name} is already fused by {self.groups[self.owner[name]].pass_name}"
            if not self.live(node):
                return f"{name} launches no kernel"
            if any(k.cost.task_type is TaskType.AI_CPU for k in node.kernels):
                return f"{name} runs on the AI CPU"
        if self.creates_cycle(members):
            return "fusing would create a cycle through other kernels"
        return ""

    def creates_cycle(self, members: Sequence[str]) -> bool:
        """A kernel computing ``members`` would both feed and read another kernel."""
        inside = set(members)
        stack = [u.name for m in members for u in self.users(m) if u.name not in inside]
        seen: set[str] = set()
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            if name in inside:
                return True
            unit = [name]
            if name in self.owner:
                unit = list(self.groups[self.owner[name]].members)
            for m in unit:
                seen.add(m)
                stack.extend(u.name for u in self.users(m) if u.name not in seen)
        return False

    def commit(
        self,
        pass_name: str,
        op_type: str,
        members: Sequence[str],
        *,
        name: str | None = None,
        work: Sequence[KernelSpec] | None = None,
        cost: KernelCost | None = None,
        folded_inputs: Iterable[ValueRef] = (),
    ) -> Group:
        """Fuse ``members`` (callers checked :meth:`blocker`) and record the hit."""
        ordered = tuple(sorted(dict.fromkeys(members), key=self.order.__getitem__))
        if work is None:
            work = [k for m in ordered for k in self.graph.node(m).kernels]
        folded = frozenset(self.resolve(r) for r in folded_inputs)
        group = Group(pass_name, op_type, name or ordered[-1], ordered, tuple(work), cost, folded)
        for m in ordered:
            self.owner[m] = len(self.groups)
        self.groups.append(group)
        self.records.append(PassRecord(pass_name, ordered, True))
        return group

    def miss(self, pass_name: str, nodes: Sequence[str], reason: str) -> None:
        """Record that ``pass_name`` matched ``nodes`` but did not fire, and why."""
        ordered = tuple(sorted(dict.fromkeys(nodes), key=self.order.__getitem__))
        self.records.append(PassRecord(pass_name, ordered, False, reason))

    def try_fuse(
        self,
        pass_name: str,
        op_type: str,
        members: Sequence[str],
        *,
        name: str | None = None,
        work: Sequence[KernelSpec] | None = None,
        cost: KernelCost | None = None,
        folded_inputs: Iterable[ValueRef] = (),
    ) -> bool:
        """Fuse ``members`` unless :meth:`blocker` objects (then record the miss)."""
        why = self.blocker(members)
        if why:
            self.miss(pass_name, members, why)
            return False
        self.commit(
            pass_name,
            op_type,
            members,
            name=name,
            work=work,
            cost=cost,
            folded_inputs=folded_inputs,
        )
        return True

    # ---- the group's boundary ---------------------------------------------------------------

    def group_io(
        self, members: Sequence[str], skip: frozenset[ValueRef] = frozenset()
    ) -> tuple[tuple[ValueRef, ...], tuple[ValueRef, ...]]:
        """The values a kernel computing ``members`` reads from and writes to device memory:
        inputs produced outside (but ``skip``), outputs read outside or returned."""
        inside = set(members)
        inputs: dict[ValueRef, None] = {}
        outputs: dict[ValueRef, None] = {}
        for name in sorted(inside, key=self.order.__getitem__):
            node = self.graph.node(name)
            for ref in node.inputs:
                base = self.resolve(ref)
                if base.node not in inside and base not in skip:
                    inputs[base] = None
            for i in range(len(node.outputs)):
                ref = node.out(i)
                readers = self.ref_users(ref)
                if self.is_graph_output(ref) or any(u.name not in inside for u in readers):
                    outputs[ref] = None
        if not outputs:
            last = max(inside, key=self.order.__getitem__)
            outputs[ValueRef(last, 0)] = None
        return tuple(inputs), tuple(outputs)

    def external_bytes(
        self, members: Sequence[str], skip: frozenset[ValueRef] = frozenset()
    ) -> int:
        """Bytes a kernel computing ``members`` moves: each external input once (no more than
        the views of it the group reads; ``skip`` not at all) and each external output."""
        inputs, outputs = self.group_io(members, skip)
        inside = set(members)
        viewed: dict[ValueRef, int] = {}
        for name in inside:
            for ref in dict.fromkeys(self.graph.node(name).inputs):
                base = self.resolve(ref)
                if base.node not in inside:
                    viewed[base] = viewed.get(base, 0) + self.graph.spec(ref).nbytes
        total = sum(min(self.graph.spec(r).nbytes, viewed.get(r, 0)) for r in inputs)
        return total + sum(self.graph.spec(r).nbytes for r in outputs)

    def group_cost(self, group: Group) -> KernelCost:
        """The fused kernel's cost: the pass's own, or the generic fused cost."""
        if group.cost is not None:
            return group.cost
        nbytes = self.external_bytes(group.members, group.folded_inputs)
        return fused_cost(self.spec, group.work, external_bytes=nbytes)

    # ---- the launch list ---------------------------------------------------------------------

    def kernels(self) -> list[GraphKernel]:
        """One kernel per group and the eager kernels of every other live node, in a
        topological order of those units (graph order where it is free)."""
        units: list[tuple[str, ...]] = [g.members for g in self.groups]
        unit_of: dict[str, int] = dict(self.owner)
        for node in self.live_ops():
            if node.name not in unit_of and node.kernels:
                unit_of[node.name] = len(units)
                units.append((node.name,))
        deps: list[set[int]] = [set() for _ in units]
        for u, members in enumerate(units):
            for m in members:
                for ref in self.graph.node(m).inputs:
                    p = unit_of.get(self.resolve(ref).node)
                    if p is not None and p != u:
                        deps[u].add(p)
        waiting = [len(d) for d in deps]
        after: list[list[int]] = [[] for _ in units]
        for u, d in enumerate(deps):
            for p in d:
                after[p].append(u)
        first = [min(self.order[m] for m in members) for members in units]
        ready = [(first[u], u) for u in range(len(units)) if waiting[u] == 0]
        heapq.heapify(ready)
        result: list[GraphKernel] = []
        emitted = 0
        while ready:
            _, u = heapq.heappop(ready)
            emitted += 1
            result.extend(self._unit_kernels(u, units[u]))
            for v in after[u]:
                waiting[v] -= 1
                if waiting[v] == 0:
                    heapq.heappush(ready, (first[v], v))
        if emitted < len(units):  # pragma: no cover - blocker() prevents it
            raise RuntimeError(f"graph {self.graph.name!r}: fused kernels form a cycle")
        return result

    def _in_place(
        self,
        members: Sequence[str],
        inputs: tuple[ValueRef, ...],
        outputs: tuple[ValueRef, ...],
    ) -> tuple[tuple[ValueRef, ...], tuple[ValueRef, ...]]:
        """``inputs`` and ``outputs`` with values written in place (AssignRemovePass) replaced
        by the parameter they live in (a value the graph returns is written both there and in
        place); the members' in-place writes added to the outputs of the kernel that writes
        the members' values (the one with outputs)."""
        if not self.inplace:
            return inputs, outputs
        swap = {s: d for s, d in self.inplace.items() if not self.is_graph_output(s)}
        ins = tuple(dict.fromkeys(swap.get(r, r) for r in inputs))
        outs = dict.fromkeys(swap.get(r, r) for r in outputs)
        inside = set(members)
        for src, dst in self.inplace.items():
            if outputs and src.node in inside:
                outs[dst] = None
        return ins, tuple(outs)

    def _unit_kernels(self, u: int, members: tuple[str, ...]) -> list[GraphKernel]:
        kernels = self._unit_kernels_raw(u, members)
        if not self.inplace:
            return kernels
        result = []
        for k in kernels:
            ins, outs = k.inputs, k.outputs
            if ins or outs:
                ins, outs = self._in_place(k.members, ins, outs)
            result.append(dataclasses.replace(k, inputs=ins, outputs=outs))
        return result

    def _unit_kernels_raw(self, u: int, members: tuple[str, ...]) -> list[GraphKernel]:
        if u < len(self.groups):
            group = self.groups[u]
            inputs, outputs = self.group_io(members, group.folded_inputs)
            cost = self.group_cost(group)
            return [
                GraphKernel(
                    group.name, group.op_type, cost, members, inputs, outputs, group.pass_name
                )
            ]
        node = self.graph.node(members[0])
        inputs = tuple(dict.fromkeys(self.resolve(r) for r in node.inputs))
        outs = tuple(node.out(i) for i in range(len(node.outputs)))
        count = len(node.kernels)
        return [
            GraphKernel(
                self.kernel_names[node.name][k],
                kernel.op_type,
                kernel.cost,
                (node.name,),
                inputs if k == 0 else (),
                outs if k == count - 1 else (),
            )
            for k, kernel in enumerate(node.kernels)
        ]


def attrs_key(attrs: dict[str, object]) -> str:
    """A canonical text of a node's attributes (for CSE)."""
    return json.dumps(attrs, sort_keys=True, default=repr)
