"""Graph-mode settings: the execution mode and the host cost of compiling a graph (torch-free).

``mode`` follows TorchAir's ``CompilerConfig.mode``:

- ``"max-autotune"`` (default): a GE graph with fusion, sunk to the device, one launch per
  call;
- ``"reduce-overhead"``: an aclgraph capture: no fusion, still one launch per call; refuses
  dynamic shapes and random-number ops, and runs only on Atlas A2/A3-class (split-core) chips.

``single_stream`` runs every graph on one stream (GE's ``SINGLE_STREAM_ENABLE``, TorchAir's
``ge_config.enable_single_stream``); by default static graphs get the stream plan's streams.

Compilation cost (a deterministic model, a default to calibrate): ``COMPILE_BASE_NS`` per graph
plus ``COMPILE_NODE_NS`` per op node, charged once on the host clock when the graph is compiled.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_AUTOTUNE = "max-autotune"
REDUCE_OVERHEAD = "reduce-overhead"
MODES = (MAX_AUTOTUNE, REDUCE_OVERHEAD)

#: host time to compile one graph, whatever its size (GE session, graph build, kernel cache)
COMPILE_BASE_NS = 20_000_000
#: host time per op node (shape inference, op selection, tiling, one compiled kernel)
COMPILE_NODE_NS = 200_000


def compile_ns(op_nodes: int) -> int:
    """Host time to compile a graph of ``op_nodes`` op nodes."""
    return COMPILE_BASE_NS + COMPILE_NODE_NS * max(0, op_nodes)


@dataclass(frozen=True, slots=True)
class GraphConfig:
    """How the npu backend compiles and runs graphs."""

    mode: str = MAX_AUTOTUNE
    single_stream: bool = False
    #: how several inputs' dynamic gears combine (TorchAir's
    #: ``inference_config.dynamic_gears_merge_policy``: "zip" or "product")
    gears_merge: str = "zip"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"graph mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.gears_merge not in ("zip", "product"):
            raise ValueError(
                f"dynamic_gears_merge_policy must be zip or product, got {self.gears_merge!r}"
            )

    @property
    def fuse(self) -> bool:
        """Whether the passes fuse (max-autotune) or only clean up (reduce-overhead)."""
        return self.mode == MAX_AUTOTUNE
