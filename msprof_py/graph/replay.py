"""Stored-plan replay of a compiled graph: values from one generated host function.

The first call of a compiled graph for given input metadata interprets the ATen FX graph node
by node through the adapter (:meth:`msprof_py.graph.runner.CompiledGraph._run`): that is how
the runner learns each node's kernels and plans the graph. Nothing of that depends on values,
so a later call with the same input metadata (shapes, strides, dtypes, storage formats, and in
shapes-only mode which inputs hold host-known values) launches the same plan. Such a call only
needs the values: :func:`host_module` turns the FX graph into one FX-generated Python function
over host tensors that calls, for every node, the CPU (or meta) callable the adapter's fallback
would have called for it (its host kernel, its shapes-only shape function, or the op itself),
so values are bitwise those of the interpreted call. :class:`Replay` runs it on host views of
the inputs, wraps the results into npu tensors exactly as the interpreted call left them
(fresh tensors in the graph's workspace with their storage formats, inputs, views of inputs or
of other outputs) and hands back the plan and its precomputed task list for the launch.

A graph whose nodes the adapter handles specially (host-only ops, explicit npu kernels other
than copies and empty tensors, ops returning Python values, random-number ops, dynamic shapes,
``get_attr`` constants) is never replayed: :func:`host_module` says why.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from msprof_py.adapter import fast_numerics, formats, shapes_only
from msprof_py.adapter.backend import plan_of
from msprof_py.adapter.kernels import _runs_whole
from msprof_py.adapter.opcost import dtype_name
from msprof_py.adapter.runtime import AdapterState
from msprof_py.adapter.tensors import (
    adopt,
    backing_storage,
    hold_device_bytes,
    host_view,
    is_npu_device,
    set_storage_format,
    storage_format,
)
from msprof_py.device.engine import GraphTask
from msprof_py.device.formats import storage_bytes
from msprof_py.graph.pipeline import GraphPlan
from msprof_py.graph.replay_known import KnownProgram, same_known

_META = torch.device("meta")
_CPU = torch.device("cpu")

#: ops with an explicit npu kernel whose host computation is the op itself on host tensors
#: (a cast or copy, an uninitialised tensor)
_SAME_ON_HOST = frozenset({"aten::_to_copy", "aten::empty.memory_format", "aten::empty_strided"})

_has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key


class NotReplayable(Exception):
    """The graph (or this call) cannot be replayed; the message says why."""


def _widened(call: Callable[..., Any]) -> Callable[..., Any]:
    def widened(*args: Any, **kwargs: Any) -> Any:
        return fast_numerics.call_widened(call, args, kwargs)

    return widened


def _host_target(op: Any, args: tuple, kwargs: dict, state: AdapterState) -> Callable[..., Any]:
    """The host callable the adapter computes FX target ``op`` with (raises NotReplayable)."""
    if op is operator.getitem:
        return op
    if not isinstance(op, torch._ops.OpOverload):
        raise NotReplayable(f"target {op!r} is not an ATen op")
    name = op.name()
    if torch.Tag.nondeterministic_seeded in op.tags:
        raise NotReplayable(f"{name} draws random numbers")
    plan = plan_of(op)
    if plan.host_only or plan.returns_value:
        raise NotReplayable(f"{name} runs on the host or returns a value")
    explicit = _has_kernel(name, "PrivateUse1") and not _runs_whole(name)
    if explicit:
        if name in _SAME_ON_HOST:
            return op
        raise NotReplayable(f"{name} has an npu kernel of its own")
    composite = _has_kernel(name, "CompositeExplicitAutograd") or _has_kernel(
        name, "CompositeImplicitAutograd"
    )
    if composite and not _has_kernel(name, "PrivateUse1"):
        return op  # decomposes alike on both devices (its parts reach the fallback)
    if plan.view:
        return op
    # the fallback: _run_on_host's choice of callable
    numbers = (bool, int, float, complex)
    if any(i < len(args) and isinstance(args[i], numbers) for i in plan.tensor_args):
        raise NotReplayable(f"{name} takes a number the fallback rebuilds as a tensor")
    call = plan.host_call or plan.op
    if state.meta and plan.meta_call is not None and not kwargs:
        call = plan.meta_call
    if state.fast and plan.widened:
        call = _widened(call)
    return call


def _host_arg(value: Any, host_device: torch.device) -> Any:
    if isinstance(value, torch.device):
        if value.type != "npu":
            raise NotReplayable(f"an argument names device {value}")
        return host_device
    if isinstance(value, dict):
        return {k: _host_arg(v, host_device) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_host_arg(v, host_device) for v in value)
    if isinstance(value, torch.Tensor):
        raise NotReplayable("a tensor constant in the graph's arguments")
    return value


def host_module(gm: torch.fx.GraphModule, state: AdapterState) -> torch.fx.GraphModule:
    """``gm`` as a module over host tensors: every ATen call replaced by the callable the
    adapter computes it with, npu device arguments by the host device (raises NotReplayable)."""
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    output = graph.graph_copy(gm.graph, env)
    graph.output(output)
    host_device = _META if state.meta else _CPU
    for node in graph.nodes:
        if node.op in ("placeholder", "output"):
            continue
        if node.op != "call_function":
            raise NotReplayable(f"node {node.name} is a {node.op}")
        kwargs = dict(node.kwargs)
        node.target = _host_target(node.target, node.args, kwargs, state)
        node.args = _host_arg(node.args, host_device)
        node.kwargs = _host_arg(kwargs, host_device)
    return torch.fx.GraphModule(
        torch.nn.Module(), graph, class_name=f"Host_{gm.__class__.__name__}"
    )


# ---- input metadata -----------------------------------------------------------------------


def input_key(args: list[Any], state: AdapterState) -> tuple | None:
    """What a stored plan depends on in the inputs (None: a CPU tensor input, not replayed)."""
    key: list[Any] = [id(state), state.internal_format]
    for a in args:
        if isinstance(a, torch.Tensor):
            if not is_npu_device(a.device):
                return None
            known = state.meta and getattr(a.untyped_storage(), "_npu_known", None) is not None
            key.append(
                (
                    tuple(a.shape),
                    a.stride(),
                    a.storage_offset(),
                    a.dtype,
                    storage_format(a),
                    known,
                    a.is_conj(),
                    a.is_neg(),
                )
            )
        elif a is None or isinstance(a, (bool, int, float, str)):
            key.append(a)
        else:
            return None
    return tuple(key)


def _layout(t: torch.Tensor) -> tuple:
    return (
        tuple(t.shape),
        t.stride(),
        t.storage_offset(),
        id(backing_storage(t)),
        backing_storage(t).nbytes(),
        storage_format(t),
    )


def snapshot(args: list[Any]) -> list[tuple | None]:
    """The layout of each npu input before a call (to tell whether the call changed it)."""
    return [_layout(a) if isinstance(a, torch.Tensor) else None for a in args]


def _retags(
    args: list[Any],
    before: list[tuple | None],
    order: Callable[[int, tuple, tuple], int | None],
) -> tuple[tuple[int, str, tuple], ...]:
    """The in-place format conversions an interpreted call made to its inputs, in its order
    (raises NotReplayable for any other change of an input's layout)."""
    found = []
    for i, (a, layout) in enumerate(zip(args, before, strict=True)):
        if layout is None:
            continue
        after = _layout(a)
        if after == layout:
            continue
        if after[:-1] != layout[:-1] or after[-1] is None:
            raise NotReplayable("the call changed an input's layout")
        old = layout[-1] or (formats.ND, tuple(a.shape))
        position = order(i, old, after[-1])
        if position is None:
            raise NotReplayable("an input changed format without a TransData")
        found.append((position, i, after[-1][0], after[-1][1]))
    found.sort()
    return tuple((i, fmt, shape) for _, i, fmt, shape in found)


# ---- outputs ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Leaf:
    """How one tensor of the graph's result is rebuilt: ``kind`` "fresh" (its own storage,
    ``fmt`` its storage format), "input" (input ``index`` itself), "view" (a view of input
    ``index``) or "alias" (a view of result tensor ``index``, an earlier fresh one)."""

    kind: str
    index: int = -1
    fmt: tuple | None = None


def _flatten(value: Any, into: list[Any]) -> None:
    if isinstance(value, (list, tuple)):
        for v in value:
            _flatten(v, into)
    else:
        into.append(value)


def _describe_outputs(
    args: list[Any], result: Any, state: AdapterState
) -> tuple[_Leaf | None, ...]:
    leaves: list[Any] = []
    _flatten(result, leaves)
    by_id = {id(a): i for i, a in enumerate(args) if isinstance(a, torch.Tensor)}
    input_storage = {
        id(backing_storage(a)): i for i, a in enumerate(args) if isinstance(a, torch.Tensor)
    }
    fresh_storage: dict[int, int] = {}
    described: list[_Leaf | None] = []
    for k, leaf in enumerate(leaves):
        if not isinstance(leaf, torch.Tensor):
            described.append(None)
            continue
        if not is_npu_device(leaf.device):
            raise NotReplayable("the graph returns a host tensor")
        storage = id(backing_storage(leaf))
        if id(leaf) in by_id:
            described.append(_Leaf("input", by_id[id(leaf)]))
            continue
        base = args[input_storage[storage]] if storage in input_storage else None
        if base is None and storage in fresh_storage:
            base = leaves[fresh_storage[storage]]
        if base is not None and (base.dtype != leaf.dtype or leaf.is_conj() or leaf.is_neg()):
            raise NotReplayable("the graph returns a reinterpreting view")
        if storage in input_storage:
            described.append(_Leaf("view", input_storage[storage]))
        elif storage in fresh_storage:
            described.append(_Leaf("alias", fresh_storage[storage]))
        elif leaf.is_conj() or leaf.is_neg():
            raise NotReplayable("the graph returns a conjugate or negative view")
        else:
            fresh_storage[storage] = k
            described.append(_Leaf("fresh", fmt=storage_format(leaf)))
    return tuple(described)


def _rebuild(value: Any, leaves: list[Any], it: list[int]) -> Any:
    if isinstance(value, (list, tuple)):
        return type(value)(_rebuild(v, leaves, it) for v in value)
    it[0] += 1
    return leaves[it[0] - 1]


def _skeleton(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return type(value)(_skeleton(v) for v in value)
    return None


def _meta_layout(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return (
            tuple(value.shape),
            value.stride(),
            value.storage_offset(),
            value.dtype,
            backing_storage(value).nbytes(),
        )
    return ("value", value)


def _meta_leaf(layout: Any) -> Any:
    if layout[0] == "value":
        return layout[1]
    shape, stride, offset, dtype, nbytes = layout
    storage = torch.UntypedStorage(nbytes, device=_META)
    return torch.empty(0, dtype=dtype, device=_META).set_(storage, offset, shape, stride)


def _npu_view(base: torch.Tensor, host: torch.Tensor) -> torch.Tensor:
    return base.as_strided(host.shape, host.stride(), host.storage_offset())


class Replay:
    """One stored plan and how to rebuild a call's npu result from host values."""

    __slots__ = ("fn", "known", "layouts", "leaves", "plan", "retags", "skeleton", "tasks")

    def __init__(
        self,
        fn: Callable[..., Any],
        plan: GraphPlan,
        tasks: list[GraphTask],
        leaves: tuple[_Leaf | None, ...],
        known: KnownProgram | None,
        retags: tuple[tuple[int, str, tuple], ...] = (),
    ) -> None:
        self.fn = fn
        self.plan = plan
        self.tasks = tasks
        self.leaves = leaves
        #: the known-value program to run with each call (shapes-only mode; None: no known
        #: value enters or leaves the graph)
        self.known = known
        #: (input, format, logical shape) of each input the call converts in place (a
        #: convolution's TransData), in the call's order
        self.retags = retags
        #: shapes only: the result's structure and each leaf's (shape, stride, offset, dtype,
        #: storage bytes) or plain value, so a call builds its meta outputs without computing
        self.skeleton: Any = None
        self.layouts: list[Any] = []

    @classmethod
    def after_call(
        cls,
        fn: Callable[..., Any],
        plan: GraphPlan,
        tasks: list[GraphTask],
        args: list[Any],
        before: list[tuple | None],
        known_before: list[torch.Tensor | None],
        result: Any,
        state: AdapterState,
        retag_order: Callable[[int, tuple, tuple], int | None],
        program: Callable[[], KnownProgram],
    ) -> Replay:
        """The replay of an interpreted call that ran with inputs ``args`` (laid out as
        ``before``, holding host-known values ``known_before`` in shapes-only mode) and
        returned ``result`` (raises NotReplayable). ``retag_order(i, old, new)`` is the
        position in the call at which input ``i`` was converted in place from storage format
        ``old`` to ``new`` (None: not found); ``program()`` the graph's known-value program."""
        retags = _retags(args, before, retag_order)
        leaves = _describe_outputs(args, result, state)
        known = None
        if state.meta:
            known = program()
            written, outs = known.run(known_before)
            for i, a in enumerate(args):
                if isinstance(a, torch.Tensor):
                    expected = written[i] if i in written else known_before[i]
                    if not same_known(shapes_only.known_view(a), expected):
                        raise NotReplayable("the call leaves host-known values in an input")
            flat: list[Any] = []
            _flatten(result, flat)
            for leaf, spec, value in zip(flat, leaves, outs, strict=True):
                fresh = spec is not None and spec.kind == "fresh"
                if fresh and not same_known(shapes_only.known_view(leaf), value):
                    raise NotReplayable("the graph returns host-known values")
            uses = [*known_before, *written.values(), *outs]
            if all(v is None for v in uses):
                known = None
        stored = cls(fn, plan, tasks, leaves, known, retags)
        if state.meta:
            stored.skeleton = _skeleton(result)
            stored.layouts = [_meta_layout(v) for v in flat]
        return stored

    def run(self, args: list[Any], state: AdapterState) -> Any:
        """Compute one call's values on the host and return its npu result (with a graph
        capture active in ``state``, so fresh outputs live in the workspace until launched)."""
        for i, fmt, shape in self.retags:  # as transdata() does: tag, then the padded bytes
            t = args[i]
            set_storage_format(t, fmt, shape)
            if fmt != formats.ND:
                nbytes = storage_bytes(shape, dtype_name(t.dtype), fmt)
                hold_device_bytes(t, nbytes, state, "TransData")
        if self.skeleton is not None:  # shapes only: the outputs' layouts are known
            host_result = self.skeleton
            host_leaves = [_meta_leaf(v) for v in self.layouts]
            return self._wrap(args, state, host_result, host_leaves)
        views: dict[int, torch.Tensor] = {}
        host_args = []
        for a in args:
            if isinstance(a, torch.Tensor):
                view = views.get(id(a))
                if view is None:
                    view = views[id(a)] = host_view(a)
                host_args.append(view)
            else:
                host_args.append(a)
        views.clear()
        host_result = self.fn(*host_args)
        del host_args
        host_leaves: list[Any] = []
        _flatten(host_result, host_leaves)
        return self._wrap(args, state, host_result, host_leaves)

    def _wrap(
        self, args: list[Any], state: AdapterState, host_result: Any, host_leaves: list
    ) -> Any:
        leaves: list[Any] = []
        for spec, host in zip(self.leaves, host_leaves, strict=True):
            if spec is None:
                leaves.append(host)
            elif spec.kind == "fresh":
                out = adopt(host, state, "graph output")
                if spec.fmt is not None:
                    set_storage_format(out, spec.fmt[0], spec.fmt[1])
                leaves.append(out)
            elif spec.kind == "input":
                leaves.append(args[spec.index])
            elif spec.kind == "view":
                leaves.append(_npu_view(args[spec.index], host))
            else:
                leaves.append(_npu_view(leaves[spec.index], host))
        if self.known is not None:
            self._known_values(args, leaves)
        return _rebuild(host_result, leaves, [0])

    def _known_values(self, args: list[Any], leaves: list[Any]) -> None:
        """Leave in the written inputs and the fresh outputs the host-known values an
        interpreted call would (shapes-only mode)."""
        assert self.known is not None
        inputs = [shapes_only.known_view(a) if isinstance(a, torch.Tensor) else None for a in args]
        written, outs = self.known.run(inputs)
        for spec, leaf, value in zip(self.leaves, leaves, outs, strict=True):
            if spec is not None and spec.kind == "fresh" and value is not None:
                shapes_only.write_known(leaf, value)
        for i, value in written.items():
            shapes_only.write_known(args[i], value)
