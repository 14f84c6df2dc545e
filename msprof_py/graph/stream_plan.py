"""Stream planning: independent branches of a compiled graph on parallel streams (torch-free).

This first version keeps every kernel on stream 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from msprof_py.graph.ir import Graph, GraphKernel


@dataclass(frozen=True, slots=True)
class StreamPlan:
    """Kernels with their stream and cross-stream waits set; how many streams and events."""

    kernels: tuple[GraphKernel, ...]
    streams: int
    events: int


def plan_streams(
    graph: Graph, kernels: Sequence[GraphKernel], *, max_streams: int = 8
) -> StreamPlan:
    """Assign ``kernels`` (in launch order) to streams (at most ``max_streams``)."""
    del graph, max_streams
    return StreamPlan(tuple(kernels), 1, 0)
