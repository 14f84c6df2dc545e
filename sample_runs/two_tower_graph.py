"""A two-tower model in graph mode: stream planning runs the towers in parallel.

Two independent towers read the same batch (a "wide" tower of large matmuls and a "deep"
tower of small ones with layer norms) and join at the end (concatenation, then a linear
head), as in recommendation and retrieval models. Compiled with
``torch.compile(model, backend="npu")``, the graph's stream plan (GE's stream allocator) gives
each tower's kernels a stream of its own, with events where the towers join, so kernels that
do not fill the chip run side by side. The same training step is then compiled with one
stream (``options={"single_stream": True}``, or ``SINGLE_STREAM_ENABLE=1`` in the environment,
GE's switch) and the two step times are printed, with the streams and events of each plan.

The device runs in shapes-only mode (``numerics="none"``); times are simulated.

    python sample_runs/two_tower_graph.py [--steps 3] [--batch-size 64] [--device ascend910b]
    python sample_runs/two_tower_graph.py --quick      # small sizes, for tests
"""

from __future__ import annotations

import argparse
import gc
import sys
from dataclasses import dataclass, field

import torch
from torch import nn


class TwoTower(nn.Module):
    """Two towers over the same features, joined by concatenation and a linear head."""

    def __init__(self, features: int, wide: int, deep: int, depth: int, classes: int) -> None:
        super().__init__()
        self.wide = nn.Sequential(nn.Linear(features, wide), nn.ReLU(), nn.Linear(wide, wide))
        layers: list[nn.Module] = [nn.Linear(features, deep)]
        for _ in range(depth):
            layers += [nn.GELU(), nn.LayerNorm(deep), nn.Linear(deep, deep)]
        self.deep = nn.Sequential(*layers)
        self.head = nn.Linear(wide + deep, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.cat([self.wide(x), self.deep(x)], dim=1))


@dataclass(frozen=True)
class Workload:
    """Sizes of the comparison."""

    batch: int = 64
    features: int = 256
    wide: int = 2048
    deep: int = 64
    depth: int = 12
    classes: int = 16
    steps: int = 3

    @classmethod
    def quick(cls) -> Workload:
        """Small sizes (the same structure) for tests."""
        return cls(batch=16, features=32, wide=128, deep=16, depth=2, classes=4, steps=2)


@dataclass
class StreamRun:
    """Step times and the stream plans of one compiled run."""

    name: str
    step_ns: list[int] = field(default_factory=list)
    #: graph name -> (streams, events) of its last plan
    plans: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def mean_step_ns(self) -> float:
        """Mean step time without the first (compiling) step."""
        times = self.step_ns[1:] if len(self.step_ns) > 1 else self.step_ns
        return sum(times) / len(times)


def run(single_stream: bool, work: Workload) -> StreamRun:
    """Train ``work.steps`` compiled steps with one stream or with the stream plan's."""
    import msprof_py.adapter
    from msprof_py.graph import backend
    from msprof_py.graph.runner import compiled_graphs

    npu = msprof_py.adapter.current_device()
    backend.reset()
    gc.collect()
    earlier = {id(g) for g in compiled_graphs()}
    torch.manual_seed(0)
    model = TwoTower(work.features, work.wide, work.deep, work.depth, work.classes).to("npu")
    step_model = torch.compile(model, backend="npu", options={"single_stream": single_stream})
    # fused: one optimizer kernel, so the step is the graphs' device time, not per-tensor updates
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, fused=True)
    x = torch.empty(work.batch, work.features).to("npu")
    y = torch.zeros(work.batch, dtype=torch.long).to("npu")
    result = StreamRun("single stream" if single_stream else "multi-stream")
    torch.npu.synchronize()
    for _ in range(work.steps):
        start = npu.engine.host_ns
        loss = nn.functional.cross_entropy(step_model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.npu.synchronize()
        result.step_ns.append(npu.engine.host_ns - start)
    for graph in compiled_graphs():
        if graph.last_plan is not None and id(graph) not in earlier:
            result.plans[graph.name] = (graph.last_plan.streams, graph.last_plan.events)
    del model, step_model, opt, loss
    backend.reset()
    return result


def compare(work: Workload) -> tuple[StreamRun, StreamRun]:
    """(multi-stream, single-stream) runs of the same training step."""
    return run(False, work), run(True, work)


def _streams_events(pair: tuple[int, int]) -> str:
    return f"{pair[0]} / {pair[1]}"


def table(runs: tuple[StreamRun, ...]) -> str:
    """Step time and streams/events per graph of each run."""
    names = sorted({name for r in runs for name in r.plans})
    header = f"{'plan':<14} {'step ms':>9} " + " ".join(f"{n + ' s/e':>18}" for n in names)
    lines = [header, "-" * len(header)]
    for r in runs:
        cells = " ".join(f"{_streams_events(r.plans.get(n, (0, 0))):>18}" for n in names)
        lines.append(f"{r.name:<14} {r.mean_step_ns / 1e6:>9.3f} {cells}")
    return "\n".join(lines)


def _install(device: str) -> str:
    import msprof_py.adapter

    if not hasattr(torch, "npu"):
        msprof_py.adapter.install(device=device, numerics="none")
    return msprof_py.adapter.current_device().spec.name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", default="ascend910b", help="device preset (ascend910b)")
    parser.add_argument("--quick", action="store_true", help="small sizes")
    args = parser.parse_args(argv)
    work = Workload.quick() if args.quick else Workload(batch=args.batch_size, steps=args.steps)
    preset = _install(args.device)
    print(
        f"two-tower training on {preset} (shapes only): batch {work.batch}x{work.features}, "
        f"wide tower {work.wide}, deep tower {work.depth + 1}x{work.deep}; "
        "s/e = streams / events of each graph's plan"
    )
    multi, single = compare(work)
    print(table((multi, single)))
    saved = 1 - multi.mean_step_ns / single.mean_step_ns
    print(
        f"parallel streams shorten the step by {saved:.1%} ({single.mean_step_ns / 1e6:.3f} ms"
        f" -> {multi.mean_step_ns / 1e6:.3f} ms)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
