"""Host-known values through a replayed graph (shapes-only mode).

With numerics ``"none"`` the adapter keeps the values the host put on the device, and computes
an op's outputs from them when all its inputs are known (:mod:`msprof_py.adapter.shapes_only`):
a BatchNorm's ``num_batches_tracked`` counts its steps on the host, a causal mask keeps its
values. An interpreted graph call does that node by node. :class:`KnownProgram` does the same for
a replayed call: it evaluates, on the CPU, the nodes whose tensor inputs are all known (from the
known values of the graph's inputs, or none), and says which values the call leaves in the
inputs it writes (``copy_`` into a placeholder) and in the tensors it returns. The replay checks
that prediction once against the interpreted call it stores, so a graph whose known values it
would not reproduce is not replayed.
"""

from __future__ import annotations

import operator
from typing import Any

import torch

from msprof_py.adapter.shapes_only import KNOWN_LIMIT_BYTES

_CPU = torch.device("cpu")
_COPY = torch.ops.aten.copy_.default
#: ops whose npu result is never known (an uninitialised tensor)
_UNKNOWN = frozenset({"aten::empty.memory_format", "aten::empty_strided"})


def _host(value: Any) -> Any:
    if isinstance(value, torch.device):
        return _CPU
    if isinstance(value, dict):
        return {k: _host(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_host(v) for v in value)
    return value


def _small(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return value.untyped_storage().nbytes() <= KNOWN_LIMIT_BYTES
    if isinstance(value, (list, tuple)):
        return all(_small(v) for v in value)
    return True


class KnownProgram:
    """The known-value evaluation of one ATen FX graph."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        self.nodes = list(gm.graph.nodes)
        self.placeholders = [n for n in self.nodes if n.op == "placeholder"]
        self.index = {n: i for i, n in enumerate(self.placeholders)}
        #: placeholder index of each input the graph writes (copy_ into it)
        self.written = sorted(
            {
                self.index[n.args[0]]
                for n in self.nodes
                if n.op == "call_function" and n.target is _COPY and n.args[0] in self.index
            }
        )

    def run(self, inputs: list[torch.Tensor | None]) -> tuple[dict[int, Any], list[Any]]:
        """(input index -> its known values after the call or None, for each written input;
        the known value or None of each tensor of the graph's flattened result), from the
        inputs' known values (None: unknown or not a tensor)."""
        kv: dict[torch.fx.Node, Any] = {}
        written: dict[int, Any] = {i: None for i in self.written}
        result: list[Any] = []
        for node in self.nodes:
            if node.op == "placeholder":
                kv[node] = inputs[self.index[node]]
            elif node.op == "output":
                flat: list[Any] = []
                _flatten_nodes(node.args[0], flat)
                result = [kv.get(n) if isinstance(n, torch.fx.Node) else None for n in flat]
            elif node.op == "call_function":
                kv[node] = self._value(node, kv, written)
        return written, result

    def _value(self, node: torch.fx.Node, kv: dict, written: dict[int, Any]) -> Any:
        if any(kv.get(n) is None for n in node.all_input_nodes):
            if node.target is _COPY and node.args[0] in self.index:
                written[self.index[node.args[0]]] = None
            return None
        target = node.target
        if target is operator.getitem:
            return kv[node.args[0]][node.args[1]]
        if not isinstance(target, torch._ops.OpOverload):
            return None
        if torch.Tag.nondeterministic_seeded in target.tags or target.name() in _UNKNOWN:
            return None
        args = torch.fx.node.map_arg(node.args, kv.__getitem__)
        kwargs = torch.fx.node.map_arg(node.kwargs, kv.__getitem__)
        if target is _COPY and node.args[0] in self.index:
            dst, src = args[0], args[1]
            value = torch.empty_like(dst).copy_(src)
            written[self.index[node.args[0]]] = value
            return None
        try:
            value = target(*_host(args), **_host(kwargs))
        except (RuntimeError, NotImplementedError, TypeError, ValueError):
            return None
        return value if _small(value) else None


def _flatten_nodes(value: Any, into: list[Any]) -> None:
    if isinstance(value, (list, tuple)):
        for v in value:
            _flatten_nodes(v, into)
    else:
        into.append(value)


def same_known(a: Any, b: Any) -> bool:
    """Both unknown, or both known with equal dtype, shape and values (NaN equal to NaN)."""
    if a is None or b is None:
        return a is None and b is None
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return False
    return (a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)) or (
        a.dtype == b.dtype
        and a.shape == b.shape
        and a.is_floating_point()
        and bool(torch.isclose(a, b, rtol=0, atol=0, equal_nan=True).all())
    )
