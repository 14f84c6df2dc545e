"""The ``"npu"`` Dynamo backend: ``torch.compile(model, backend="npu")``.

Dynamo hands the backend a Torch-level FX graph; AOTAutograd (:func:`aot_autograd`, with the
partitioner ``aot_eager`` uses) turns it into ATen forward and backward graphs (or one
inference graph), and each is compiled into a :class:`~msprof_py.graph.runner.CompiledGraph`.
The mode comes from ``options={"mode": ...}``, ``mode=`` (``torch.compile(..., mode=...)``) or
a :class:`~msprof_py.graph.config.GraphConfig`; TorchAir's spelling
(``torchair.get_npu_backend(compiler_config=...)``) builds the same backend.

Reduce-overhead mode refuses, at compile time and with one line, graphs with dynamic shapes or
random-number ops, and chips where capture is not supported (coupled-core chips such as the
910A). Every graph the backend receives is counted per code object
(:mod:`msprof_py.graph.recompiles`).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.exc import ShortenTraceback
from torch._functorch.partitioners import min_cut_rematerialization_partition

from msprof_py.adapter import runtime
from msprof_py.graph import recompiles
from msprof_py.graph.config import MAX_AUTOTUNE, REDUCE_OVERHEAD, GraphConfig
from msprof_py.graph.ir import NodeKind
from msprof_py.graph.runner import CompiledGraph

NAME = "npu"

#: environment switch forcing one stream per graph (GE's name for it)
SINGLE_STREAM_ENV = "SINGLE_STREAM_ENABLE"


class GraphModeError(ShortenTraceback):
    """The graph cannot run in the chosen mode. Dynamo re-raises it unchanged (one line)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, first_useful_frame=None)
        self.message = message

    def __str__(self) -> str:  # Dynamo appends hints to the arguments: keep the one line
        return self.message


_GRAPH_IDS = itertools.count()


def reset() -> None:
    """Forget every compiled graph: Dynamo's caches, the recompile counts, graph numbering."""
    global _GRAPH_IDS
    torch._dynamo.reset()
    recompiles.reset()
    _GRAPH_IDS = itertools.count()


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def single_stream_env() -> bool:
    """``SINGLE_STREAM_ENABLE`` is set to 1/true in the environment."""
    return _truthy(os.environ.get(SINGLE_STREAM_ENV, ""))


def resolve_config(
    config: GraphConfig | Any = None, mode: str | None = None, options: Mapping | None = None
) -> GraphConfig:
    """The :class:`GraphConfig` from any of the accepted spellings (TorchAir's CompilerConfig
    included: anything with a ``mode`` attribute, and ``ge_config.enable_single_stream``).

    One stream per graph is chosen by ``options={"single_stream": True}``, the config, or
    ``SINGLE_STREAM_ENABLE=1`` in the environment (read when a graph is compiled)."""
    if isinstance(config, GraphConfig):
        chosen, single, merge = config.mode, config.single_stream, config.gears_merge
    else:
        chosen = getattr(config, "mode", None) if config is not None else None
        ge_config = getattr(config, "ge_config", None)
        single = _truthy(getattr(ge_config, "enable_single_stream", False))
        inference = getattr(config, "inference_config", None)
        merge = str(getattr(inference, "dynamic_gears_merge_policy", "zip"))
    if options and "mode" in options:
        chosen = options["mode"]
    if options and "single_stream" in options:
        single = _truthy(options["single_stream"])
    if mode is not None and mode != "default":
        chosen = mode
    return GraphConfig(chosen or MAX_AUTOTUNE, single or single_stream_env(), merge)


def register_npu() -> None:
    """Make sure ``"npu"`` is in Dynamo's registry (the adapter registers it when Dynamo
    loads; this imports Dynamo and registers now)."""
    from torch._dynamo.backends import registry

    from msprof_py.adapter import compat

    compat._register_npu_backend(registry)


def _is_symbolic(value: Any) -> bool:
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return True
    if isinstance(value, torch.Tensor):
        return any(isinstance(s, torch.SymInt) for s in value.shape)
    return False


def _dynamic(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> bool:
    if any(_is_symbolic(x) for x in example_inputs):
        return True
    return any(_is_symbolic(n.meta.get("val")) for n in gm.graph.nodes if n.op == "placeholder")


def _attention_without_dropout(node: torch.fx.Node) -> bool:
    """A fused-attention node (tagged seeded for its dropout) that draws nothing."""
    if node.target is not torch.ops.aten._scaled_dot_product_fused_attention_overrideable.default:
        return False
    p = node.args[4] if len(node.args) > 4 else node.kwargs.get("dropout_p", 0.0)
    return isinstance(p, (int, float)) and float(p) == 0.0


def _rng_ops(gm: torch.fx.GraphModule) -> list[str]:
    found = []
    for node in gm.graph.nodes:
        target = node.target
        seeded = isinstance(target, torch._ops.OpOverload) and (
            torch.Tag.nondeterministic_seeded in target.tags
        )
        if seeded and not _attention_without_dropout(node):
            found.append(str(target.overloadpacket.__name__))
    return sorted(set(found))


def _check_reduce_overhead(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> None:
    spec = runtime.state().npu.spec
    if spec.core_mode == "coupled":
        raise GraphModeError(
            f"reduce-overhead mode: capture is not supported on {spec.name} "
            "(aclgraph needs an Atlas A2/A3-class chip); use mode='max-autotune'"
        )
    if _dynamic(gm, example_inputs):
        raise GraphModeError(
            "reduce-overhead mode cannot capture a graph with dynamic shapes; "
            "compile with dynamic=False or use mode='max-autotune'"
        )
    rng = _rng_ops(gm)
    if rng:
        raise GraphModeError(
            f"reduce-overhead mode cannot capture random-number ops ({', '.join(rng)}); "
            "remove dropout/random ops from the compiled region or use mode='max-autotune'"
        )


def _outer_kinds(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> list[NodeKind]:
    """INPUT or PARAM for each input of Dynamo's graph (parameters and buffers: PARAM)."""
    kinds = []
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, value in enumerate(example_inputs):
        source = ""
        if i < len(placeholders):
            grapharg = placeholders[i].meta.get("grapharg")
            source = grapharg.source.name if grapharg is not None else ""
            source = source() if callable(source) else source
        param = isinstance(value, torch.nn.Parameter) or any(
            key in str(source) for key in ("_parameters[", "_buffers[")
        )
        kinds.append(NodeKind.PARAM if param else NodeKind.INPUT)
    return kinds


def _aot_kinds(gm: torch.fx.GraphModule, outer: list[NodeKind]) -> dict[str, NodeKind]:
    """Kinds of an AOT graph's placeholders: a forward input keeps its Dynamo kind (AOT's
    ``desc`` says which one it is); activations and tangents are INPUT."""
    kinds: dict[str, NodeKind] = {}
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        desc = node.meta.get("desc")
        kind = NodeKind.INPUT
        index = getattr(desc, "idx", None)
        desc_name = type(desc).__name__
        if "Param" in desc_name or "Buffer" in desc_name:
            kind = NodeKind.PARAM
        elif desc_name == "PlainAOTInput" and isinstance(index, int) and index < len(outer):
            kind = outer[index]
        kinds[node.name] = kind
    return kinds


def _graph_compiler(
    role: str,
    graph_id: int,
    outer: list[NodeKind],
    config: GraphConfig,
    code: recompiles.CodeStats | None = None,
) -> Callable[[torch.fx.GraphModule, list[Any]], CompiledGraph]:
    def compile_graph(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> CompiledGraph:
        if config.mode == REDUCE_OVERHEAD:
            _check_reduce_overhead(gm, example_inputs)
        compiled = CompiledGraph(
            f"graph{graph_id}_{role}",
            gm,
            _aot_kinds(gm, outer),
            config,
            dynamic=_dynamic(gm, example_inputs),
        )
        if code is not None:  # for the profile's graphs table
            compiled.code = {
                "code": code.code,
                "compiles": code.compiles,
                "recompile_limit": code.limit,
            }
        return compiled

    return compile_graph


def npu_backend(
    gm: torch.fx.GraphModule,
    example_inputs: list[Any],
    *,
    mode: str | None = None,
    options: Mapping | None = None,
    config: GraphConfig | Any = None,
    decompositions: Mapping | None = None,
) -> Callable[..., Any]:
    """Compile Dynamo's graph ``gm`` for the simulated NPU (the ``"npu"`` backend)."""
    cfg = resolve_config(config, mode, options)
    code = recompiles.note_graph()
    graph_id = next(_GRAPH_IDS)
    outer = _outer_kinds(gm, example_inputs)
    compiler = aot_autograd(
        fw_compiler=_graph_compiler("forward", graph_id, outer, cfg, code),
        bw_compiler=_graph_compiler("backward", graph_id, outer, cfg, code),
        inference_compiler=_graph_compiler("inference", graph_id, outer, cfg, code),
        partition_fn=min_cut_rematerialization_partition,
        keep_inference_input_mutations=True,
        decompositions=dict(decompositions) if decompositions else {},
    )
    return compiler(gm, example_inputs)


def make_backend(
    config: GraphConfig | Any = None, decompositions: Mapping | None = None
) -> Callable[..., Any]:
    """A backend callable bound to ``config`` (what ``torchair.get_npu_backend`` returns)."""
    cfg = resolve_config(config)

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any], **kwargs: Any) -> Any:
        return npu_backend(gm, example_inputs, config=cfg, decompositions=decompositions, **kwargs)

    backend.__name__ = NAME
    return backend


def graph_compiler(config: GraphConfig) -> Callable[[torch.fx.GraphModule, list[Any]], Any]:
    """An ATen-graph compiler (``fw_compiler`` for ``aot_module_simplified``): every graph it
    compiles is an INPUT-only graph of its own."""

    def compile_graph(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> CompiledGraph:
        return _graph_compiler("graph", next(_GRAPH_IDS), [], config)(gm, example_inputs)

    return compile_graph
