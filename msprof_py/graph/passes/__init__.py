"""GE-style graph passes: which kernels a compiled graph launches (torch-free).

:func:`run_passes` is the entry point the backend calls. This first version applies no pass:
every node launches its eager kernels.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from msprof_py.device.spec import DeviceSpec
from msprof_py.graph.ir import Graph, GraphKernel, PassRecord, unfused_kernels


@dataclass(slots=True)
class PassResult:
    """The kernels graph mode launches, in launch order, and what every pass tried."""

    kernels: list[GraphKernel]
    records: list[PassRecord] = field(default_factory=list)


def run_passes(graph: Graph, spec: DeviceSpec, *, fuse: bool = True) -> PassResult:
    """Run the passes over ``graph`` for ``spec``'s chip; ``fuse=False`` only cleans up
    (the reduce-overhead mode captures without fusing)."""
    del spec, fuse
    return PassResult(unfused_kernels(graph))
