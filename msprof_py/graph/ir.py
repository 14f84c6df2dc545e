"""The device-side description of one compiled graph (torch-free).

The backend converts each FX graph it compiles into a :class:`Graph`: nodes in topological
order, each with the tensors it produces (:class:`TensorSpec`) and the kernels eager mode
launches for it (:class:`KernelSpec`, as the cost model costed them). Passes, the memory
planner and the stream planner read this description and produce :class:`GraphKernel` lists,
never touching torch; the same description is recorded in the profile.

Values are referenced as :class:`ValueRef` (producer node, output index): FX ``getitem``
nodes do not appear, a multi-output node (``native_batch_norm`` ...) is one node with several
outputs.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from msprof_py.device.costmodel import KernelCost
from msprof_py.device.dtypes import itemsize


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """Shape, dtype (canonical device name, ``"float16"`` ...) and storage format of a tensor."""

    shape: tuple[int, ...]
    dtype: str
    format: str = "ND"

    @property
    def numel(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of the plain layout (padded formats are the cost model's business)."""
        return self.numel * itemsize(self.dtype)


@dataclass(frozen=True, slots=True, order=True)
class ValueRef:
    """Output ``index`` of node ``node``."""

    node: str
    index: int = 0


class NodeKind(str, enum.Enum):
    """What a node is: graph inputs (data, parameters, constants) or a computing op."""

    #: a user input: data, activations fed from outside, anything that changes per call
    INPUT = "input"
    #: a parameter or buffer: a fixed address, same tensor every call (not constant in training)
    PARAM = "param"
    #: a value known at compile time (folded weights in inference, literal tensors)
    CONST = "const"
    #: an ATen op
    OP = "op"


@dataclass(frozen=True, slots=True)
class KernelSpec:
    """One device kernel eager mode launches for a node, costed as eager mode costs it."""

    op_type: str
    cost: KernelCost


@dataclass(slots=True)
class Node:
    """One node of a compiled graph.

    ``target`` is the ATen op's base name (``"convolution"``, ``"native_batch_norm"``,
    ``"addmm"`` ...; empty for inputs); ``inputs`` are the tensor arguments in schema order;
    ``attrs`` the other arguments by schema name (JSON-able: numbers, strings, lists, None).
    ``view_of`` names the input a view op's output aliases (views launch no kernel and keep
    their base alive). ``module`` / ``module_path``: the nn.Module the op ran in, as class
    path (``Sequential/BatchNorm2d``: the levels Dynamo recorded, the compiled module's own
    class only where Dynamo lists it) and instance path (``layer1.0.bn1``, from the compiled
    module; "" where the graph does not say, e.g. backward nodes).
    """

    name: str
    kind: NodeKind
    target: str = ""
    inputs: tuple[ValueRef, ...] = ()
    outputs: tuple[TensorSpec, ...] = ()
    attrs: dict[str, Any] = field(default_factory=dict)
    kernels: tuple[KernelSpec, ...] = ()
    view_of: ValueRef | None = None
    module: str = ""
    module_path: str = ""

    @property
    def is_op(self) -> bool:
        """The node computes (not a graph input)."""
        return self.kind is NodeKind.OP

    def out(self, index: int = 0) -> ValueRef:
        """A reference to output ``index``."""
        return ValueRef(self.name, index)


@dataclass(slots=True)
class Graph:
    """A compiled graph: nodes in topological order and the values it returns.

    ``dynamic`` marks a graph compiled with symbolic shapes (GE keeps those on one stream and
    skips shape-dependent fusions). ``notes``: pass records decided before the graph existed
    (an SDPA call traced as torch's decomposition, with why it is no fused-attention node).
    """

    name: str
    nodes: list[Node]
    outputs: tuple[ValueRef, ...] = ()
    dynamic: bool = False
    notes: tuple[PassRecord, ...] = ()
    _by_name: dict[str, Node] = field(init=False, repr=False)
    _consumers: dict[str, list[str]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.reindex()

    def reindex(self) -> None:
        """Rebuild the lookup tables after ``nodes`` changed; checks topological order."""
        self._by_name = {}
        self._consumers = {}
        for node in self.nodes:
            if node.name in self._by_name:
                raise ValueError(f"graph {self.name!r}: node {node.name!r} appears twice")
            for ref in node.inputs:
                if ref.node not in self._by_name:
                    raise ValueError(
                        f"graph {self.name!r}: node {node.name!r} reads {ref.node!r} "
                        "before it is defined"
                    )
                self._consumers[ref.node].append(node.name)
            self._by_name[node.name] = node
            self._consumers[node.name] = []
        for ref in self.outputs:
            if ref.node not in self._by_name:
                raise ValueError(f"graph {self.name!r} returns unknown node {ref.node!r}")

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    def node(self, name: str) -> Node:
        """The node called ``name``."""
        return self._by_name[name]

    def spec(self, ref: ValueRef) -> TensorSpec:
        """The tensor ``ref`` refers to."""
        return self._by_name[ref.node].outputs[ref.index]

    def consumers(self, name: str) -> list[Node]:
        """Nodes reading any output of ``name``, in graph order (each once)."""
        seen: dict[str, None] = dict.fromkeys(self._consumers[name])
        return [self._by_name[n] for n in seen]

    def ops(self) -> list[Node]:
        """The computing nodes, in order."""
        return [n for n in self.nodes if n.is_op]

    def is_output(self, ref: ValueRef) -> bool:
        """``ref`` leaves the graph (returned to the caller)."""
        return ref in self.outputs


@dataclass(frozen=True, slots=True)
class GraphKernel:
    """One kernel graph mode launches: a node's kernel or one fused kernel for several nodes.

    ``members`` are the IR nodes it computes (one for an unfused node); ``inputs`` and
    ``outputs`` the values it reads from and writes to device memory (a fused kernel's
    intermediates stay on chip and appear in neither). ``name`` is what the profile shows
    (the graph node's name, as GE names kernels after nodes); ``pass_name`` the fusion pass
    that made it ("" for an unfused node). ``stream`` and ``waits`` (indices of earlier
    kernels in the launch list it must wait for on another stream) are set by the stream
    planner; 0 and () until then.
    """

    name: str
    op_type: str
    cost: KernelCost
    members: tuple[str, ...]
    inputs: tuple[ValueRef, ...]
    outputs: tuple[ValueRef, ...]
    pass_name: str = ""
    stream: int = 0
    waits: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class PassRecord:
    """One pattern a pass tried: the nodes it matched, whether it fired, and why not."""

    pass_name: str
    nodes: tuple[str, ...]
    hit: bool
    reason: str = ""


def kernel_names(graph: Graph) -> dict[str, tuple[str, ...]]:
    """The launch names of every op node's eager kernels, unique within the graph.

    A node with one kernel keeps its name; a node ``x`` with several gets ``x_0``, ``x_1``,
    ... unless one of those is taken (another node called ``x_1``, or a kernel of an earlier
    node), then ``x_k0``, ``x_k1``, ..., then ``x_k0_2``, ... (first free suffix). Every node
    name is reserved first, so a kernel never takes a node's name (nor the name of a fused
    kernel named after a node); nodes are visited in graph order, so the result depends on the
    graph alone.
    """
    taken = {n.name for n in graph.nodes}
    result: dict[str, tuple[str, ...]] = {}
    for node in graph.nodes:
        if not node.is_op or not node.kernels:
            continue
        count = len(node.kernels)
        if count == 1:
            result[node.name] = (node.name,)
            continue
        names: list[str] = []
        for attempt, sep in enumerate(("_", "_k", "_k")):
            tail = f"_{attempt}" if attempt > 1 else ""
            names = [f"{node.name}{sep}{k}{tail}" for k in range(count)]
            if not taken.intersection(names):
                break
        extra = 3
        while taken.intersection(names):  # pathological: more suffixes, still in order
            names = [f"{node.name}_k{k}_{extra}" for k in range(count)]
            extra += 1
        taken.update(names)
        result[node.name] = tuple(names)
    return result


def unfused_kernels(graph: Graph) -> list[GraphKernel]:
    """Every node's eager kernels as graph kernels, in node order (no pass applied).

    A node with several eager kernels (a convolution backward's two GEMMs) gives one graph
    kernel per eager kernel; the first reads the node's inputs, the last writes its outputs.
    Kernel names come from :func:`kernel_names` (unique in the graph).
    """
    result: list[GraphKernel] = []
    names = kernel_names(graph)
    for node in graph.nodes:
        if not node.is_op or not node.kernels:
            continue
        outs = tuple(node.out(i) for i in range(len(node.outputs)))
        count = len(node.kernels)
        for k, kernel in enumerate(node.kernels):
            result.append(
                GraphKernel(
                    names[node.name][k],
                    kernel.op_type,
                    kernel.cost,
                    (node.name,),
                    node.inputs if k == 0 else (),
                    outs if k == count - 1 else (),
                )
            )
    return result


def value_sizes(graph: Graph, refs: Sequence[ValueRef]) -> int:
    """Total plain-layout bytes of ``refs``."""
    return sum(graph.spec(r).nbytes for r in refs)
