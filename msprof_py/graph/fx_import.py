"""ATen FX graph -> graph IR (:class:`msprof_py.graph.ir.Graph`).

The runner executes an FX graph node by node (:mod:`msprof_py.graph.runner`) and notes, per
node, what it produced (:class:`TensorSpec` of each tensor output, or the plain value of a
non-tensor one, e.g. a symbolic size) and the kernels eager mode launched for it. This module
turns that into the IR: placeholders become INPUT or PARAM nodes (parameters and buffers keep
their address every call), ``get_attr`` tensors CONST nodes, ATen calls OP nodes with their
tensor arguments as inputs (schema order) and the other arguments as JSON-able attributes by
schema name; ``getitem`` disappears into ``ValueRef(node, index)``; view ops record the input
they alias and launch nothing.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from msprof_py.adapter.backend import plan_of
from msprof_py.adapter.opcost import dtype_name
from msprof_py.adapter.runtime import CapturedKernel
from msprof_py.adapter.tensors import storage_format
from msprof_py.graph.ir import (
    Graph,
    KernelSpec,
    Node,
    NodeKind,
    PassRecord,
    TensorSpec,
    ValueRef,
)

#: what one FX node produced: a tensor, a sequence of outputs (None for no tensor), or a value
Produced = TensorSpec | list | Any


def tensor_spec(t: torch.Tensor) -> TensorSpec:
    """Shape, canonical dtype and storage format of npu tensor ``t``."""
    shape = tuple(int(s) for s in t.shape)
    fmt = storage_format(t) if t.device.type == "npu" else None
    layout = fmt[0] if fmt is not None and tuple(fmt[1]) == shape else "ND"
    return TensorSpec(shape, dtype_name(t.dtype), layout)


def describe(value: Any) -> Produced:
    """What :func:`import_graph` needs to know about a node's runtime result."""
    if isinstance(value, torch.Tensor):
        return tensor_spec(value)
    if isinstance(value, (list, tuple)):
        return [describe(v) for v in value]
    return value


def json_value(value: Any) -> Any:
    """An argument as a JSON-able value (numbers, strings, lists, None)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return json_value(value.node.hint if hasattr(value.node, "hint") else str(value))
    if isinstance(value, torch.dtype):
        return dtype_name(value)
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    if isinstance(value, TensorSpec):
        return None
    return str(value)


class _Refs:
    """FX node name -> the IR value(s) it stands for."""

    def __init__(self) -> None:
        #: tensor-producing node -> ValueRef per output position (None: no tensor there)
        self.refs: dict[str, list[ValueRef | None]] = {}
        #: non-tensor node -> its runtime value
        self.values: dict[str, Any] = {}

    def resolve(self, arg: Any) -> tuple[list[ValueRef], Any]:
        """(tensor refs inside ``arg``, its JSON-able value with tensors as None)."""
        if isinstance(arg, torch.fx.Node):
            refs = self.refs.get(arg.name)
            if refs is not None:
                found = [r for r in refs if r is not None]
                return found, None
            return [], json_value(self.values.get(arg.name))
        if isinstance(arg, (list, tuple)):
            tensors: list[ValueRef] = []
            plain = []
            for item in arg:
                t, v = self.resolve(item)
                tensors.extend(t)
                plain.append(v)
            return tensors, plain
        return [], json_value(arg)


def _schema_names(target: Any, count: int) -> list[str]:
    schema = getattr(target, "_schema", None)
    if schema is None:
        return [f"arg{i}" for i in range(count)]
    names = [a.name for a in schema.arguments]
    return names + [f"arg{i}" for i in range(len(names), count)]


def _base_name(target: Any) -> str:
    schema = getattr(target, "_schema", None)
    if schema is not None:
        return schema.name.split("::", 1)[-1]
    return getattr(target, "__name__", str(target))


def _outputs(produced: Produced, name: str) -> tuple[tuple[TensorSpec, ...], list[ValueRef | None]]:
    if isinstance(produced, TensorSpec):
        return (produced,), [ValueRef(name, 0)]
    if isinstance(produced, list):
        specs: list[TensorSpec] = []
        refs: list[ValueRef | None] = []
        for item in produced:
            if isinstance(item, TensorSpec):
                refs.append(ValueRef(name, len(specs)))
                specs.append(item)
            else:
                refs.append(None)
        return tuple(specs), refs
    return (), []


_ROOT = re.compile(r"^L\[['\"][^'\"]*['\"]\]\.?")
_INDEX = re.compile(r"(?:\._modules)?\[['\"]?(\w+)['\"]?\]")


def module_of(fx: torch.fx.Node) -> tuple[str, str]:
    """The module an FX node ran in, from Dynamo's ``nn_module_stack``: class path
    (``Sequential/BatchNorm2d``) and instance path (``layers.0.1``) below the compiled module;
    ("", "") when the node has none (backward graphs, code outside any submodule)."""
    stack = fx.meta.get("nn_module_stack") or {}
    if not stack:
        return "", ""
    levels = list(stack.values())
    classes = "/".join(getattr(cls, "__name__", str(cls)) for _, cls in levels)
    path = _INDEX.sub(lambda m: "." + m.group(1), _ROOT.sub("", str(levels[-1][0])))
    return classes, path.strip(".")


def import_graph(
    name: str,
    gm: torch.fx.GraphModule,
    produced: Mapping[str, Produced],
    kernels: Mapping[str, Sequence[CapturedKernel]],
    kinds: Mapping[str, NodeKind],
    *,
    dynamic: bool = False,
) -> Graph:
    """The IR of ``gm`` as executed: ``produced`` and ``kernels`` per FX node name, ``kinds``
    the kind of each tensor placeholder (INPUT when absent)."""
    refs = _Refs()
    nodes: list[Node] = []
    outputs: tuple[ValueRef, ...] = ()
    for fx in gm.graph.nodes:
        result = produced.get(fx.name)
        if fx.op in ("placeholder", "get_attr"):
            specs, out_refs = _outputs(result, fx.name)
            if len(specs) != 1 or not isinstance(result, TensorSpec):
                refs.values[fx.name] = result
                continue
            kind = kinds.get(fx.name, NodeKind.INPUT) if fx.op == "placeholder" else NodeKind.CONST
            nodes.append(Node(fx.name, kind, outputs=specs))
            refs.refs[fx.name] = out_refs
        elif fx.op == "call_function" and fx.target is operator.getitem:
            source, index = fx.args
            parent = refs.refs.get(source.name) if isinstance(source, torch.fx.Node) else None
            if parent is not None and isinstance(index, int) and index < len(parent):
                refs.refs[fx.name] = [parent[index]] if parent[index] is not None else []
            else:
                refs.values[fx.name] = result
        elif fx.op in ("call_function", "call_method", "call_module"):
            specs, out_refs = _outputs(result, fx.name)
            if not specs:  # a size computation on symbolic shapes: host only
                refs.values[fx.name] = result
                continue
            names = _schema_names(fx.target, len(fx.args))
            inputs: list[ValueRef] = []
            attrs: dict[str, Any] = {}
            for arg_name, arg in [*zip(names, fx.args, strict=False), *fx.kwargs.items()]:
                tensors, plain = refs.resolve(arg)
                inputs.extend(tensors)
                if not tensors:
                    attrs[arg_name] = plain
            view_of = None
            if isinstance(fx.target, torch._ops.OpOverload) and plan_of(fx.target).view and inputs:
                view_of = inputs[0]
            module, module_path = module_of(fx)
            nodes.append(
                Node(
                    fx.name,
                    NodeKind.OP,
                    _base_name(fx.target),
                    tuple(inputs),
                    specs,
                    attrs,
                    tuple(KernelSpec(k.op_type, k.cost) for k in kernels.get(fx.name, ())),
                    view_of,
                    module,
                    module_path,
                )
            )
            refs.refs[fx.name] = out_refs
        elif fx.op == "output":
            tensors, _ = refs.resolve(fx.args[0])
            outputs = tuple(dict.fromkeys(tensors))
    return Graph(name, nodes, outputs, dynamic, sdpa_misses(gm, {n.name for n in nodes}))


def sdpa_misses(gm: torch.fx.GraphModule, names: set[str]) -> tuple[PassRecord, ...]:
    """One miss record per SDPA call traced as torch's decomposition (its nodes carry the
    reason in their ``custom`` meta, :mod:`msprof_py.adapter.sdpa_graph`), with the IR nodes
    (``names``) it became."""
    from msprof_py.adapter.sdpa_graph import CALL_KEY, MISS_KEY
    from msprof_py.graph.passes.sdpa import SDPA_PASS

    calls: dict[Any, tuple[str, list[str]]] = {}
    for fx in gm.graph.nodes:
        custom = fx.meta.get("custom") or {}
        if MISS_KEY in custom and fx.name in names:
            _, members = calls.setdefault(custom.get(CALL_KEY), (custom[MISS_KEY], []))
            members.append(fx.name)
    return tuple(PassRecord(SDPA_PASS, tuple(m), False, r) for r, m in calls.values())
