"""Running a compiled graph: host values as in eager mode, one graph launch on the device.

Every call executes the ATen FX graph node by node through the normal adapter under capture
(:mod:`msprof_py.graph.capture`), so values are bitwise those of eager mode and each node's
eager kernels are known. The first call with given input shapes, dtypes and formats converts
the graph to IR, charges its compile time on the host clock (a "compile <graph>" host span,
:func:`msprof_py.graph.config.compile_ns`) and plans it (:mod:`msprof_py.graph.pipeline`);
later calls reuse the plan (re-planned without compile time when the captured kernels change,
e.g. once the weights have been converted to their kernel format). A call whose input
metadata matches an earlier interpreted call's replays that call's stored plan
(:mod:`msprof_py.graph.replay`): one generated host function computes the values, no node goes
through the adapter, and the same tasks are launched (:func:`set_plan_replay` turns it off).
Then the plan is launched:
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

from msprof_py.adapter import runtime, shapes_only
from msprof_py.adapter.runtime import AdapterState, CapturedKernel
from msprof_py.adapter.tensors import hold_own_memory, hold_workspace, is_npu
from msprof_py.device import Stream
from msprof_py.graph import fx_import, gears, replay, replay_known
from msprof_py.graph.capture import capturing
from msprof_py.graph.config import MAX_AUTOTUNE, GraphConfig, compile_ns
from msprof_py.graph.ir import NodeKind
from msprof_py.graph.pipeline import GraphPlan, graph_tasks, plan_graph
from msprof_py.graph.publish import publish

#: every live compiled graph (for inspection: :func:`compiled_graphs`)
_GRAPHS: weakref.WeakSet[CompiledGraph] = weakref.WeakSet()

#: whether compiled graphs replay their stored plans (:func:`set_plan_replay`)
_REPLAY = [True]


def set_plan_replay(enabled: bool) -> None:
    """Turn the stored-plan replay on (the default) or off: off, every call of a compiled
    graph interprets it node by node through the adapter, as the first call does."""
    _REPLAY[0] = bool(enabled)


def plan_replay() -> bool:
    """Whether compiled graphs replay their stored plans."""
    return _REPLAY[0]


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


def _known_copy(value: Any) -> torch.Tensor | None:
    """A copy of the host-known values of npu tensor ``value`` (None: unknown, no tensor)."""
    if not isinstance(value, torch.Tensor):
        return None
    view = shapes_only.known_view(value)
    return None if view is None else view.clone()


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
        #: input metadata -> the stored plan a call with it replays (None: not replayable)
        self._replays: dict[tuple, replay.Replay | None] = {}
        #: plan id -> its engine tasks
        self._tasks: dict[int, tuple[GraphPlan, list]] = {}
        #: the host function of the replay (None: not built yet); why the graph is never
        #: replayed, or "" when it is
        self._host_fn: Any = None
        self.replay_reason = "dynamic shapes" if dynamic else ""
        #: calls that replayed a stored plan
        self.replayed = 0
        #: why interpreted calls could not be stored for replay, with how many times
        self.replay_misses: dict[str, int] = {}
        #: the kernels the last interpreted call captured, and each node's span of them
        self._last_capture: tuple[list, dict] = ([], {})
        self._known: replay_known.KnownProgram | None = None
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

    def _replay_key(self, state: AdapterState, args: list[Any]) -> tuple | None:
        if not _REPLAY[0] or self.replay_reason:
            return None
        if self._host_fn is None:
            try:
                self._host_fn = replay.host_module(self.gm, state)
            except replay.NotReplayable as exc:
                self.replay_reason = str(exc)
                return None
        return replay.input_key(args, state)

    def _run(self, state: AdapterState, args: list[Any]) -> Any:
        if self.calls == 0 and self.dynamic and self.config.mode == MAX_AUTOTUNE:
            self.gears = gears.collect(args, self.config.gears_merge)
        if self.gears is not None:
            self.gears.check(args)
        key = self._replay_key(state, args)
        if key is None:
            return self._interpret(state, args, None)
        stored = self._replays.get(key, False)
        if stored is False:
            return self._interpret(state, args, key)
        if stored is None:
            return self._interpret(state, args, None)
        try:
            with capturing(state):
                result = stored.run(args, state)
        except Exception:
            if not state.meta:
                raise
            # shapes only: nothing was computed, so nothing to undo; interpret from now on
            self.replay_reason = "the host function failed"
            return self._interpret(state, args, None)
        self.calls += 1
        self.replayed += 1
        self.last_plan = stored.plan
        self._launch(state, stored.plan, result, stored.tasks)
        return result

    def _interpret(self, state: AdapterState, args: list[Any], key: tuple | None) -> Any:
        before = replay.snapshot(args) if key is not None else []
        known = [_known_copy(a) if key is not None and state.meta else None for a in args]
        result = self._interpret_call(state, args)
        if key is not None:
            plan = self.last_plan
            assert plan is not None
            try:
                self._replays[key] = replay.Replay.after_call(
                    self._host_fn.forward,
                    plan,
                    self._tasks_of(plan),
                    args,
                    before,
                    known,
                    result,
                    state,
                    self._retag_position,
                    self._known_program,
                )
            except replay.NotReplayable as exc:
                self._replays[key] = None
                self.replay_misses[str(exc)] = self.replay_misses.get(str(exc), 0) + 1
        return result

    def _known_program(self) -> replay_known.KnownProgram:
        if self._known is None:
            self._known = replay_known.KnownProgram(self.gm)
        return self._known

    def _retag_position(self, index: int, old: tuple, new: tuple) -> int | None:
        """The node position at which the last interpreted call converted input ``index``
        from storage format ``old`` to ``new`` in place: the first node reading it whose
        kernels include that TransData."""
        placeholders = [n for n in self._order if n.op == "placeholder"]
        if index >= len(placeholders):
            return None
        target = placeholders[index]
        captured, spans = self._last_capture
        for position, node in enumerate(self._order):
            span = spans.get(node.name)
            if span is None or target not in node.all_input_nodes:
                continue
            for k in captured[span[0] : span[1]]:
                if (
                    k.op_type == "TransData"
                    and k.inputs[0][2] == old[0]
                    and k.outputs[0][2] == new[0]
                    and tuple(k.inputs[0][0]) == tuple(new[1])
                ):
                    return position
        return None

    def _tasks_of(self, plan: GraphPlan) -> list:
        found = self._tasks.get(id(plan))
        if found is None or found[0] is not plan:
            found = self._tasks[id(plan)] = (plan, graph_tasks(plan))
        return found[1]

    def _interpret_call(self, state: AdapterState, args: list[Any]) -> Any:
        signature = _signature(args)
        produced: dict[str, Any] = {}
        spans: dict[str, tuple[int, int]] = {}
        with capturing(state) as captured:
            result = self._execute(args, captured, produced, spans)
        kernel_key = tuple(
            (name, tuple((k.op_type, k.cost) for k in captured[a:b]))
            for name, (a, b) in spans.items()
        )
        self._last_capture = (captured, spans)
        plan = self._plan(state, signature, kernel_key, produced, captured, spans)
        self.calls += 1
        self.last_plan = plan
        self._launch(state, plan, result, self._tasks_of(plan))
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

    def _launch(self, state: AdapterState, plan: GraphPlan, result: Any, tasks: list) -> None:
        workspace = hold_workspace(plan.memory.workspace_bytes, state, f"{self.name} workspace")
        for t in _tensors(result):
            if is_npu(t):
                hold_own_memory(t, state, f"{self.name} output")
        streams = _streams(state, plan.streams)
        state.npu.engine.submit_graph(streams, tasks, name=f"ModelExecute {self.name}")
        del workspace  # back to the caching allocator (stream-ordered, as eager frees)


def compiled_graphs() -> list[CompiledGraph]:
    """The compiled graphs alive in this process, by name."""
    return sorted(_GRAPHS, key=lambda g: g.name)
