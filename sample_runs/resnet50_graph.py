"""ResNet-50 training on the simulated Ascend NPU: eager vs graph mode, fp32 vs AMP.

Four runs of the same training step (SGD with momentum, cross-entropy, a fixed synthetic
batch): eager, eager under ``torch.autocast("npu", torch.float16)`` with a GradScaler, the
model compiled with ``torch.compile(model, backend="npu")`` (GE-style fusion, static memory
plan, one graph launch per forward and per backward), and compiled under autocast. The
device runs in shapes-only mode (``numerics="none"``: meta tensors, no values computed), so
batch 256 at 224 x 224 runs on a laptop; every figure is simulated device time.

Printed per run: step time (simulated, the mean of the steady steps), throughput
(images/s), device memory peak (the caching allocator's max allocated bytes), host launches and
device kernels per step, kernels that graph fusion made out of several nodes, and the share of
the graphs' intermediate bytes that the static memory plan saves by reuse.

Steady steps compile nothing: every variant first runs warm-up steps until ``--steps`` steps in
a row have no compile host span (a graph compile, an op's online compile or a binary kernel's
tiling; the first step compiles the graphs and most op keys, the second still meets new keys -
the optimizer's momentum update, the GradScaler's step - and on the 910A, where jit compile is
the default, each costs an online compile). Only those last ``--steps`` steps are measured; the
table says how many warm-up steps each variant dropped.

    python sample_runs/resnet50_graph.py [--steps 1] [--batch-size 256] [--device ascend910b]
    python sample_runs/resnet50_graph.py --quick      # a small ResNet, for tests
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

#: ResNet-50 v1.5: bottleneck blocks per stage
RESNET50_BLOCKS = (3, 4, 6, 3)

VARIANTS = (("eager", False, False), ("eager+AMP", False, True))
VARIANTS += (("graph", True, False), ("graph+AMP", True, True))


class Bottleneck(nn.Module):
    """1x1 -> 3x3 -> 1x1 convolutions with BN; the stride sits on the 3x3 (v1.5) and a
    projection shortcut joins when the shape changes."""

    expansion = 4

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.down: nn.Module | None = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.down is None else self.down(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """ResNet v1.5 with bottleneck blocks: 7x7 stem, max pool, four stages, pool, linear.
    The defaults are ResNet-50 for ImageNet."""

    def __init__(
        self,
        blocks: Sequence[int] = RESNET50_BLOCKS,
        width: int = 64,
        num_classes: int = 1000,
    ) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=1),
        )
        layers: list[nn.Module] = []
        cin = width
        for stage, count in enumerate(blocks):
            stage_width = width * 2**stage
            for i in range(count):
                stride = 2 if stage > 0 and i == 0 else 1
                layers.append(Bottleneck(cin, stage_width, stride))
                cin = stage_width * Bottleneck.expansion
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(self.pool(x), 1))


@dataclass(frozen=True)
class Workload:
    """Model and batch sizes of one comparison."""

    batch: int = 256
    image: int = 224
    blocks: tuple[int, ...] = RESNET50_BLOCKS
    width: int = 64
    classes: int = 1000
    #: steady (compile-free) steps measured after the warm-up
    steps: int = 1
    #: warm-up steps allowed before a variant counts as never steady
    max_warmup: int = 8

    @classmethod
    def quick(cls, steps: int = 1) -> Workload:
        """A small ResNet (one block per stage, 8 base channels, 32 x 32 images)."""
        return cls(batch=4, image=32, blocks=(1, 1, 1, 1), width=8, classes=10, steps=steps)


@dataclass
class RunResult:
    """What one variant measured (simulated device time and memory)."""

    name: str
    batch: int
    #: simulated ns of each step, from a synchronized device to a synchronized device
    #: (warm-up steps first, then the measured steady ones)
    step_ns: list[int] = field(default_factory=list)
    #: leading steps of ``step_ns`` left out of the measurement (each compiled something, or
    #: came before a step that did)
    warmup: int = 0
    #: host launches / device kernels of the last step, and how many of the launches were
    #: graph launches (``ModelExecute``)
    launches: int = 0
    kernels: int = 0
    graph_launches: int = 0
    peak_bytes: int = 0
    #: kernels of the graphs' last plans that fusion made from several nodes (0 in eager)
    fused_kernels: int = 0
    #: nodes those fused kernels compute
    fused_nodes: int = 0
    #: 1 - planned workspace / intermediates without reuse, over all graphs (None in eager)
    reuse_ratio: float | None = None
    graphs: int = 0
    #: simulated ns the host spent compiling graphs
    compile_ns: int = 0
    #: simulated ns of op compiles and tilings (new op keys), all in the warm-up steps
    op_compile_ns: int = 0

    @property
    def measured_ns(self) -> list[int]:
        """The steady steps' times: those after the warm-up."""
        return self.step_ns[self.warmup :]

    @property
    def mean_step_ns(self) -> float:
        """Mean time of the steady steps (no compile of any kind in them)."""
        times = self.measured_ns
        return sum(times) / len(times)

    @property
    def throughput(self) -> float:
        """Images per second of simulated time."""
        return self.batch / (self.mean_step_ns * 1e-9)


class _StepCounter:
    """Counts host launches, device kernels and compile spans delivered by the device."""

    def __init__(self) -> None:
        self.launches = 0
        self.graph_launches = 0
        self.kernels = 0
        #: (name, ns) of every compile or tiling host span of the step
        self.compiles: list[tuple[str, int]] = []

    def __call__(self, record: Any) -> None:
        kind = getattr(record, "kind", None)
        value = getattr(kind, "value", None)
        if value == "launch":
            self.launches += 1
            self.graph_launches += record.name.startswith("ModelExecute")
        elif value == "kernel":
            self.kernels += 1
        elif value == "api" and record.name.startswith(_COMPILE_SPANS):
            self.compiles.append((record.name, record.end_ns - record.start_ns))


#: host-span name prefixes of a graph or op compile and of a binary kernel's tiling
_COMPILE_SPANS = ("compile ", "tiling ")


def _graph_stats(result: RunResult, earlier: set[int]) -> None:
    from msprof_py.graph.runner import compiled_graphs

    workspace = no_reuse = 0
    for graph in compiled_graphs():
        plan = graph.last_plan
        if plan is None or id(graph) in earlier:  # a graph of an earlier variant
            continue
        result.graphs += 1
        fused = [k for k in plan.kernels if len(k.members) > 1]
        result.fused_kernels += len(fused)
        result.fused_nodes += sum(len(k.members) for k in fused)
        workspace += plan.memory.workspace_bytes
        no_reuse += plan.memory.no_reuse_bytes
    result.reuse_ratio = 1.0 - workspace / no_reuse if no_reuse else 0.0


def run_variant(name: str, compiled: bool, amp: bool, work: Workload) -> RunResult:
    """Train ``work.steps`` steps of one variant on the installed npu and measure them."""
    import msprof_py.adapter
    from msprof_py.graph import backend
    from msprof_py.graph.runner import compiled_graphs

    npu = msprof_py.adapter.current_device()
    backend.reset()
    gc.collect()
    earlier = {id(g) for g in compiled_graphs()}
    torch.manual_seed(0)
    model = ResNet(work.blocks, work.width, work.classes).to("npu")
    step_model = torch.compile(model, backend="npu") if compiled else model
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    scaler = torch.amp.GradScaler("npu", enabled=amp)
    images = torch.empty(work.batch, 3, work.image, work.image).to("npu")
    labels = torch.zeros(work.batch, dtype=torch.long).to("npu")
    result = RunResult(name, work.batch)
    torch.npu.synchronize()
    torch.npu.reset_peak_memory_stats()
    compiles: list[tuple[str, int]] = []
    steady = 0  # compile-free steps in a row at the end
    while steady < work.steps:
        if len(result.step_ns) >= work.steps + work.max_warmup:
            raise RuntimeError(
                f"{name}: still compiling after {len(result.step_ns)} steps "
                f"(no {work.steps} compile-free steps in a row)"
            )
        counter = _StepCounter()
        npu.subscribe(counter)
        start = npu.engine.host_ns
        with torch.autocast("npu", dtype=torch.float16, enabled=amp):
            loss = nn.functional.cross_entropy(step_model(images), labels)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        torch.npu.synchronize()
        npu.unsubscribe(counter)
        result.step_ns.append(npu.engine.host_ns - start)
        result.launches, result.kernels = counter.launches, counter.kernels
        result.graph_launches = counter.graph_launches
        compiles += counter.compiles
        steady = 0 if counter.compiles else steady + 1
    result.warmup = len(result.step_ns) - work.steps
    result.peak_bytes = torch.npu.max_memory_allocated()
    if compiled:
        _graph_stats(result, earlier)
    graph_names = {g.name for g in compiled_graphs() if id(g) not in earlier}
    for span, ns in compiles:
        if span.removeprefix("compile ") in graph_names:
            result.compile_ns += ns
        else:
            result.op_compile_ns += ns
    del model, step_model, opt, scaler, images, labels, loss
    backend.reset()
    gc.collect()
    return result


def compare(work: Workload) -> list[RunResult]:
    """Every variant of :data:`VARIANTS`, in order."""
    return [run_variant(name, compiled, amp, work) for name, compiled, amp in VARIANTS]


def table(results: Sequence[RunResult]) -> str:
    """The comparison as a fixed-width text table (graph columns "-" in eager)."""
    header = (
        f"{'variant':<10} {'warmup':>6} {'step ms':>9} {'img/s':>8} {'peak MiB':>9} "
        f"{'launches':>9} {'kernels':>8} {'fused':>6} {'reuse':>6}"
    )
    lines = [header, "-" * len(header)]
    for r in results:
        fused = f"{r.fused_kernels}" if r.reuse_ratio is not None else "-"
        reuse = f"{r.reuse_ratio:.1%}" if r.reuse_ratio is not None else "-"
        lines.append(
            f"{r.name:<10} {r.warmup:>6} {r.mean_step_ns / 1e6:>9.2f} {r.throughput:>8.1f} "
            f"{r.peak_bytes / 2**20:>9.1f} {r.launches:>9} {r.kernels:>8} {fused:>6} {reuse:>6}"
        )
    return "\n".join(lines)


def _install(device: str) -> str:
    """Install the npu in shapes-only mode unless a launcher (msprof) already did; the
    preset's name."""
    import msprof_py.adapter

    if not hasattr(torch, "npu"):
        msprof_py.adapter.install(device=device, numerics="none")
    return msprof_py.adapter.current_device().spec.name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--steps",
        type=int,
        default=1,
        help="steady (compile-free) steps measured per variant after its warm-up (default 1)",
    )
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--device", default="ascend910b", help="device preset (ascend910b)")
    parser.add_argument("--quick", action="store_true", help="a small ResNet at batch 4")
    args = parser.parse_args(argv)
    if args.quick:
        work = Workload.quick(args.steps)
    else:
        work = Workload(batch=args.batch_size, steps=args.steps)
    preset = _install(args.device)
    model = "ResNet-50" if work.blocks == RESNET50_BLOCKS and work.width == 64 else "ResNet"
    print(
        f"{model} training on {preset} (shapes only): batch {work.batch}x3x{work.image}x"
        f"{work.image}, SGD momentum; AMP = fp16 autocast; each variant measures {work.steps} "
        "steady step(s) after the warm-up steps that compile (graphs, op compiles, tilings)"
    )
    results = compare(work)
    print(table(results))
    for r in results:
        warm = ", ".join(f"{ns / 1e6:.1f}" for ns in r.step_ns[: r.warmup])
        print(
            f"{r.name}: dropped {r.warmup} warm-up step(s) ({warm} ms; op compiles/tilings "
            f"{r.op_compile_ns / 1e6:.1f} ms)",
            end="",
        )
        if r.graphs:
            print(
                f"; {r.graphs} graphs, {r.fused_nodes} nodes in {r.fused_kernels} "
                f"fused kernels, graph compile {r.compile_ns / 1e6:.1f} ms (modelled)",
                end="",
            )
        print()
    by_name = {r.name: r for r in results}
    speedup = by_name["eager+AMP"].mean_step_ns / by_name["graph+AMP"].mean_step_ns
    print(f"graph+AMP vs eager+AMP: {speedup:.2f}x faster per step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
