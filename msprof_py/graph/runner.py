"""Running a compiled graph: host values as in eager mode, one graph launch on the device.

Every call executes the ATen FX graph node by node through the normal adapter under capture
(:mod:`msprof_py.graph.capture`), so values are bitwise those of eager mode and each node's
eager kernels are known. The first call with given input shapes, dtypes and formats converts
the graph to IR, charges its compile time on the host clock (a "compile <graph>" host span,
:func:`msprof_py.graph.config.compile_ns`) and plans it (:mod:`msprof_py.graph.pipeline`);
later calls reuse the plan (re-planned without compile time when the captured kernels change,
e.g. once the weights have been converted to their kernel format). Then the plan is launched:
one workspace block of the planned size from the caching allocator for the call, device
memory for the tensors that leave the graph, and one host launch for all kernels
(:meth:`msprof_py.device.engine.Engine.submit_graph`), returning while the device works.
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Iterator
from typing import Any

import torch

from msprof_py.adapter import runtime
from msprof_py.adapter.runtime import AdapterState, CapturedKernel
from msprof_py.adapter.tensors import hold_own_memory, hold_workspace, is_npu
from msprof_py.device import Stream
from msprof_py.graph import fx_import, gears
from msprof_py.graph.capture import capturing
from msprof_py.graph.config import MAX_AUTOTUNE, GraphConfig, compile_ns
from msprof_py.graph.ir import NodeKind
from msprof_py.graph.pipeline import GraphPlan, graph_tasks, plan_graph
from msprof_py.graph.publish import publish

#: every live compiled graph (for inspection: :func:`compiled_graphs`)
_GRAPHS: weakref.WeakSet[CompiledGraph] = weakref.WeakSet()

#: engine id -> the side streams graph launches use (index 1 and up; 0 is the current stream)
_SIDE_STREAMS: dict[int, list[Stream]] = {}


def _streams(state: AdapterState, count: int) -> list[Stream]:
    engine = state.npu.engine
    side = _SIDE_STREAMS.setdefault(id(engine), [])
    while len(side) < count - 1:
        side.append(engine.create_stream())
    return [state.stream, *side[: count - 1]]


def _signature(args: list[Any]) -> tuple:
    """What a compile depends on in the inputs: shapes and dtypes (formats enter the plan
    through the kernels they make the nodes launch)."""
    key = []
    for a in args:
        if isinstance(a, torch.Tensor):
            key.append((tuple(a.shape), a.dtype))
        else:
            key.append(a if isinstance(a, (int, float, bool)) or a is None else type(a))
    return tuple(key)


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)


class CompiledGraph:
    """A boxed callable running one ATen FX graph as a graph-mode model."""

    def __init__(
        self,
        name: str,
        gm: torch.fx.GraphModule,
        kinds: dict[str, NodeKind],
        config: GraphConfig,
        *,
        dynamic: bool = False,
    ) -> None:
        #: AOTAutograd hands the arguments over as one list (an instance attribute: wrappers
        #: copy ``__dict__``)
        self._boxed_call = True
        self.name = name
        self.gm = gm
        self.kinds = kinds
        self.config = config
        self.dynamic = dynamic
        #: GE's dynamic gears (``torchair.inference.set_dim_gears`` on an input before the
        #: first call of a dynamic max-autotune graph): each gear a static subgraph
        self.gears: gears.Gears | None = None
        self.calls = 0
        #: the Dynamo code object compiled into this graph, for the profile (``code``,
        #: ``compiles``, ``recompile_limit``; the backend fills it in, empty when unknown)
        self.code: dict[str, Any] = {}
        #: the plan the latest call launched (None before the first call)
        self.last_plan: GraphPlan | None = None
        #: input signature -> {kernel signature -> plan}
        self._plans: dict[tuple, dict[tuple, GraphPlan]] = {}
        self._order = [n for n in gm.graph.nodes]
        self._last_use = self._last_uses()
        _GRAPHS.add(self)

    def _last_uses(self) -> dict[torch.fx.Node, list[torch.fx.Node]]:
        """node -> the values whose last reader it is (freed after it runs, as FX code does)."""
        last: dict[torch.fx.Node, torch.fx.Node] = {}
        for node in self._order:
            for used in node.all_input_nodes:
                last[used] = node
        freed: dict[torch.fx.Node, list[torch.fx.Node]] = {}
        for value, user in last.items():
            freed.setdefault(user, []).append(value)
        return freed

    @property
    def plans(self) -> list[GraphPlan]:
        """Every plan made so far (one per input signature and kernel set)."""
        return [p for by_kernels in self._plans.values() for p in by_kernels.values()]

    def __call__(self, args: list[Any]) -> Any:
        state = runtime.state()
        state.enter(f"npu_graph::{self.name}")  # one host op for the call; ops inside open none
        try:
            return self._run(state, args)
        finally:
            args.clear()
            state.leave()

    def _run(self, state: AdapterState, args: list[Any]) -> Any:
        if self.calls == 0 and self.dynamic and self.config.mode == MAX_AUTOTUNE:
            self.gears = gears.collect(args, self.config.gears_merge)
        if self.gears is not None:
            self.gears.check(args)
        signature = _signature(args)
        produced: dict[str, Any] = {}
        spans: dict[str, tuple[int, int]] = {}
        with capturing(state) as captured:
            result = self._execute(args, captured, produced, spans)
        kernel_key = tuple(
            (name, tuple((k.op_type, k.cost) for k in captured[a:b]))
            for name, (a, b) in spans.items()
        )
        plan = self._plan(state, signature, kernel_key, produced, captured, spans)
        self.calls += 1
        self.last_plan = plan
        self._launch(state, plan, result)
        return result

    def _execute(
        self,
        args: list[Any],
        captured: list[CapturedKernel],
        produced: dict[str, Any],
        spans: dict[str, tuple[int, int]],
    ) -> Any:
        env: dict[torch.fx.Node, Any] = {}
        inputs = iter(args)
        describe = fx_import.describe
        result: Any = None
        for node in self._order:
            op = node.op
            if op == "placeholder":
                value = next(inputs)
            elif op == "get_attr":
                value = getattr(self.gm, node.target)
            elif op == "output":
                result = torch.fx.node.map_arg(node.args[0], env.__getitem__)
                break
            else:
                a = torch.fx.node.map_arg(node.args, env.__getitem__)
                kw = torch.fx.node.map_arg(node.kwargs, env.__getitem__)
                start = len(captured)
                if op == "call_function":
                    value = node.target(*a, **kw)
                elif op == "call_method":
                    value = getattr(a[0], node.target)(*a[1:], **kw)
                else:
                    value = self.gm.get_submodule(node.target)(*a, **kw)
                if node.target is not operator.getitem:
                    spans[node.name] = (start, len(captured))
            env[node] = value
            produced[node.name] = describe(value)
            for dead in self._last_use.get(node, ()):
                env.pop(dead, None)
        return result

    def _plan(
        self,
        state: AdapterState,
        signature: tuple,
        kernel_key: tuple,
        produced: dict[str, Any],
        captured: list[CapturedKernel],
        spans: dict[str, tuple[int, int]],
    ) -> GraphPlan:
        by_kernels = self._plans.get(signature)
        compiled = 0
        if by_kernels is None:
            first = not self._plans
            by_kernels = self._plans[signature] = {}
            ops = sum(1 for n in self._order if n.op == "call_function")
            if self.gears is None:
                compiled = compile_ns(ops)
                state.npu.engine.host_span(compiled, f"compile {self.name}")
            elif first:  # every gear is compiled with the graph
                count = len(self.gears.combos)
                compiled = gears.gears_compile_ns(ops, count)
                state.npu.engine.host_span(compiled, f"compile {self.name} ({count} gears)")
        plan = by_kernels.get(kernel_key)
        if plan is None:
            kernels = {name: captured[a:b] for name, (a, b) in spans.items()}
            # a gear is a static subgraph
            dynamic = self.dynamic and self.gears is None
            graph = fx_import.import_graph(
                self.name, self.gm, produced, kernels, self.kinds, dynamic=dynamic
            )
            plan = by_kernels[kernel_key] = plan_graph(
                graph,
                state.npu.spec,
                fuse=self.config.fuse,
                single_stream=self.config.single_stream,
            )
            publish(state.npu.engine, plan, mode=self.config.mode, compile_ns=compiled, **self.code)
        return plan

    def _launch(self, state: AdapterState, plan: GraphPlan, result: Any) -> None:
        workspace = hold_workspace(plan.memory.workspace_bytes, state, f"{self.name} workspace")
        for t in _tensors(result):
            if is_npu(t):
                hold_own_memory(t, state, f"{self.name} output")
        streams = _streams(state, plan.streams)
        state.npu.engine.submit_graph(streams, graph_tasks(plan), name=f"ModelExecute {self.name}")
        del workspace  # back to the caching allocator (stream-ordered, as eager frees)


def compiled_graphs() -> list[CompiledGraph]:
    """The compiled graphs alive in this process, by name."""
    return sorted(_GRAPHS, key=lambda g: g.name)
