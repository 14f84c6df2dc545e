"""What running on the npu adapter costs in real time, next to plain CPU eager PyTorch.

Two measurements, both in one process with ``torch.set_num_threads(1)`` (``--threads N``:
N intra-op threads), each the best of several repeats:

1. per-op dispatch overhead (µs per call) of a few micro-ops on tiny tensors, CPU vs npu;
2. whole training steps (forward, backward, optimizer step; ms per step) of the ResNet and
   transformer sample models and a small-op MLP, on CPU eager, on CPU under
   ``torch.profiler.profile(activities=[CPU], record_shapes=True, with_flops=True)`` (the
   overhead people already accept when profiling: the bar to beat), on npu, and on npu inside
   an in-process recording (``msprof_py.record``: the rows ``msprof`` records; the recording's
   start, first step and stop left out, as every mode's warm-up step is). CPU eager and the npu
   modes take turns, and the ratios are given both ways: best against best, and the median
   over rounds of the two's times in one round (steadier where the machine's speed drifts).
   Each row shows the goal issue 20 states for it; a goal stated for other numerics (the AMP
   CNN's, for ``--numerics fast``) is measured in a child process with those numerics, its row
   printed after this run's, so that one run shows every goal.

The npu runs compute every value on the CPU (numerics "cpu") and model the device timeline on
top, so npu / CPU eager is the adapter's overhead. Ratios are the numbers to compare between
machines; the absolute times depend on the CPU. The npu rows also give the simulated step
time the device model predicts (not comparable to the real times). Where the compiled per-op
path (``msprof_py.adapter.native``) is built, every npu figure is also measured with it turned
off (the "Python path" columns: what runs where it cannot build).

With more than one thread the placement of the npu's backward matters: the adapter runs it
on the calling thread (:mod:`msprof_py.adapter.backward_thread`), one OpenMP team as CPU
eager has; ``--autograd-device-thread`` puts it back on autograd's device thread, where it
opens a second team and every parallel region in the process (CPU eager's too) waits for
its workers to wake.

    python benchmarks/bench_adapter.py [--repeats 5] [--steps 5] [--calls 2000] [--threads 1]
        [--numerics cpu|fast] [--workloads resnet,transformer,mlp,amp,generate]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import msprof_py.adapter
from msprof_py.adapter import backward_thread, native
from msprof_py.device import native as device_native

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "sample_runs"))


def _sample(name: str) -> ModuleType:
    """A sample script's module, imported after :func:`main` installed the npu (a sample
    installs the default device itself when none is installed)."""
    return importlib.import_module(name)


def best_of(fn: Callable[[], None], repeats: int) -> float:
    """Shortest wall time of ``repeats`` calls of ``fn`` (seconds), garbage collection off."""
    return best_of_each({"fn": fn}, repeats)["fn"]


def best_of_each(fns: dict[str, Callable[[], None]], repeats: int) -> dict[str, float]:
    """Shortest wall time of ``repeats`` calls of each of ``fns`` (seconds), the functions
    taking turns (:func:`turns`)."""
    return {name: min(times) for name, times in turns(fns, repeats).items()}


#: a call's own (start, end), seconds on ``CLOCK_MONOTONIC`` (see :func:`turns_with_spans`)
Span = tuple[float, float]


def turns(fns: dict[str, Callable[[], Span | None]], repeats: int) -> dict[str, list[float]]:
    """Wall times (seconds) of ``repeats`` rounds in which each of ``fns`` is called once,
    garbage collection off: a shared VM's speed drifts over seconds, and taking turns gives
    each the same stretch of it (one after the other, a ratio of two bests moved by 20-40%
    between runs); the times of one round compare with each other."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for name, start, end in turns_with_spans(fns, repeats):
        times[name].append(end - start)
    return times


def turns_with_spans(
    fns: dict[str, Callable[[], Span | None]], repeats: int
) -> list[tuple[str, float, float]]:
    """The calls of :func:`turns`'s rounds as (name, start, end), in seconds of
    ``CLOCK_MONOTONIC`` (the clock ``perf record -k CLOCK_MONOTONIC`` stamps samples with:
    ``sample_step.py`` gives each sample to the call it fell in). A call that returns its own
    (start, end) on that clock is timed by it (a span that leaves its set-up out)."""
    spans: list[tuple[str, float, float]] = []
    clock = time.CLOCK_MONOTONIC
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeats):
            for name, fn in fns.items():
                start = time.clock_gettime(clock)
                own = fn()
                end = time.clock_gettime(clock)
                spans.append((name, *own) if own is not None else (name, start, end))
    finally:
        if enabled:
            gc.enable()
    return spans


def median_ratio(times: dict[str, list[float]], name: str, base: str) -> float:
    """The median over rounds of ``name``'s time over ``base``'s in the same round (what a
    drift that spans a whole round leaves alone, unlike the ratio of two bests)."""
    return statistics.median(a / b for a, b in zip(times[name], times[base], strict=True))


# ---- 1. per-op dispatch overhead -----------------------------------------------------------


#: the micro-op the kernel floor is measured with
ADD = "add (16 elements)"


def micro_ops(device: str) -> dict[str, Callable[[], object]]:
    """The micro-ops, each a closure over tensors on ``device``."""
    a = torch.randn(16).to(device)
    b = torch.randn(16).to(device)
    x = torch.randn(16, 16).to(device)
    y = torch.randn(16, 16).to(device)
    return {
        ADD: lambda: a + b,
        "add_ in place (16 elements)": lambda: a.add_(b),
        "view (16 -> 4x4)": lambda: a.view(4, 4),
        "mm (16x16 @ 16x16)": lambda: x @ y,
    }


def per_call_us(op: Callable[[], object], calls: int, repeats: int) -> float:
    """Best-of-``repeats`` real µs per call of ``op`` over loops of ``calls`` calls."""

    def loop() -> None:
        for _ in range(calls):
            op()

    loop()  # warm-up: kernel caches, allocator pools
    return best_of(loop, repeats) / calls * 1e6


#: a fresh process with the npu device registered and a PrivateUse1 kernel that only returns a
#: ready tensor (for ``add.Tensor``, as the adapter registers it, and as the fallback): what
#: torch's dispatch into the kernel costs before any adapter work; ``REGISTER`` installs it
FLOOR_TEMPLATE = """
import sys, time, torch
from msprof_py.adapter.registration import register_device
register_device()
REGISTER
a, b = (torch._C._acc.create_empty_tensor((16,), torch.float32) for _ in range(2))
calls, repeats = int(sys.argv[1]), int(sys.argv[2])
best = float("inf")
for _ in range(repeats + 1):
    t0 = time.perf_counter()
    for _ in range(calls):
        a + b
    best = min(best, time.perf_counter() - t0)
print(best / calls * 1e6)
"""
#: the kernel in Python
PYTHON_KERNEL = """
made = torch._C._acc.create_empty_tensor((16,), torch.float32)
library = torch.library.Library("_", "IMPL")
library.fallback(lambda op, *args, **kwargs: made, "PrivateUse1")
aten = torch.library.Library("aten", "IMPL")
aten.impl("add.Tensor", lambda *args, **kwargs: made, "PrivateUse1")
"""
#: the kernel in C++: ``native_floor.cpp`` (``argv[4]``), built in folder ``argv[3]``
NATIVE_KERNEL = """
from torch.utils.cpp_extension import load
load("native_floor", [sys.argv[4]], build_directory=sys.argv[3]).install_floor()
"""


def kernel_floor_us(calls: int, repeats: int, native_build: Path | None = None) -> float:
    """µs per ``a + b`` on npu tensors whose kernel does nothing (measured in a child): the
    Python kernel, or with ``native_build`` (a folder) the C++ one built there."""
    kernel, extra = PYTHON_KERNEL, []
    if native_build is not None:
        kernel = NATIVE_KERNEL
        extra = [str(native_build), str(ROOT / "benchmarks" / "native_floor.cpp")]
    code = FLOOR_TEMPLATE.replace("REGISTER", kernel)
    out = subprocess.run(
        [sys.executable, "-c", code, str(calls), str(repeats), *extra],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if out.returncode:
        sys.exit(f"the fallback floor's child failed:\n{out.stderr[-2000:]}")
    return float(out.stdout.strip().splitlines()[-1])


# ---- 2. whole training steps ---------------------------------------------------------------


class SmallOpMLP(nn.Module):
    """6 x [Linear(64, 64) + LayerNorm + GELU] and a classifier: many small ops per step."""

    def __init__(self, width: int = 64, depth: int = 6, num_classes: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for _ in range(depth):
            layers += [nn.Linear(width, width), nn.LayerNorm(width), nn.GELU()]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


@dataclass
class Workload:
    """A model, its optimizer and a fixed batch, built fresh for one device, and the npu /
    CPU eager ratios issue 20 aims at, the adapter alone and recorded (None: no goal stated),
    under the numerics they are stated for (None: either)."""

    key: str
    name: str
    build: Callable[[str], Callable[[], torch.Tensor]]
    goal: float | None = None
    recorded_goal: float | None = None
    goal_numerics: str | None = None

    def goals_apply(self, numerics: str) -> bool:
        """Whether this workload's goals are stated for ``numerics``."""
        return self.goal_numerics is None or self.goal_numerics == numerics


def _resnet(device: str) -> Callable[[], torch.Tensor]:
    model = _sample("train_resnet").build(0).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    images, labels = _sample("train_resnet").synthetic_batch(8)
    images, labels = images.to(device), labels.to(device)

    def step() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        opt.step()
        return loss

    return step


def _transformer(device: str) -> Callable[[], torch.Tensor]:
    cfg = _sample("train_transformer").Config()
    model = _sample("train_transformer").build(cfg, 0).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    tokens, targets = _sample("train_transformer").synthetic_tokens(8, cfg)
    tokens, targets = tokens.to(device), targets.to(device)
    return lambda: _sample("train_transformer").train_step(model, opt, tokens, targets)


def _mlp(device: str) -> Callable[[], torch.Tensor]:
    torch.manual_seed(0)
    model = SmallOpMLP().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(32, 64).to(device)
    y = torch.randint(0, 10, (32,)).to(device)

    def step() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


def _amp_resnet(device: str) -> Callable[[], torch.Tensor]:
    """The ResNet sample's step under autocast (float16) with a GradScaler on the npu; on CPU
    the same step in float32 (the issue's baseline: CPU fp32 eager)."""
    model = _sample("train_resnet").build(0).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    images, labels = _sample("train_resnet").synthetic_batch(8)
    images, labels = images.to(device), labels.to(device)
    amp = device == "npu"
    scaler = torch.amp.GradScaler(device, enabled=amp)

    def step() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.float16, enabled=amp):
            loss = F.cross_entropy(model(images), labels)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    return step


class TinyGPT(nn.Module):
    """A 2-layer GPT (d64, 4 heads, 64-token context, 256-token vocabulary): when it samples
    one token at a time, every op works on a few hundred elements."""

    def __init__(self, vocab: int = 256, width: int = 64, heads: int = 4, context: int = 64):
        super().__init__()
        self.context = context
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(context, width)
        layer = nn.TransformerEncoderLayer(
            width, heads, 4 * width, dropout=0.0, batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        length = idx.shape[1]
        positions = torch.arange(length, device=idx.device)
        x = self.tokens(idx) + self.positions(positions)
        mask = nn.Transformer.generate_square_subsequent_mask(length, device=idx.device)
        x = self.blocks(x, mask=mask, is_causal=True)
        return self.head(self.norm(x))


GENERATED_TOKENS = 200


def _generate(device: str) -> Callable[[], torch.Tensor]:
    """Greedy sampling of 200 tokens one at a time (the context cropped to the model's), as a
    GPT trainer's evaluation does; one "step" is the whole generation."""
    torch.manual_seed(0)
    model = TinyGPT().to(device).eval()
    prompt = torch.zeros(1, 1, dtype=torch.long).to(device)

    @torch.no_grad()
    def step() -> torch.Tensor:
        idx = prompt
        for _ in range(GENERATED_TOKENS):
            logits = model(idx[:, -model.context :])
            next_token = logits[:, -1, :].argmax(dim=-1, keepdim=True)
            idx = torch.cat([idx, next_token], dim=1)
        return idx

    return step


WORKLOADS = [
    Workload("resnet", "ResNet sample (batch 8x3x32x32, SGD)", _resnet, 1.2, 1.3),
    Workload(
        "transformer", "transformer sample (8x64 tokens, d128, 2 layers, AdamW)", _transformer
    ),
    Workload("mlp", "small-op MLP (6x[Linear 64+LayerNorm+GELU], batch 32, SGD)", _mlp, 2.5, 3.0),
    Workload(
        "amp",
        "AMP CNN: ResNet sample, npu fp16 autocast + GradScaler vs CPU fp32",
        _amp_resnet,
        1.5,
        goal_numerics="fast",
    ),
    Workload(
        "generate", f"tiny GPT generating {GENERATED_TOKENS} tokens one at a time", _generate, 3.0
    ),
]


@dataclass
class StepTimes:
    """Real ms per step of one workload in each mode, and the npu's simulated ms per step."""

    cpu_ms: float
    profiled_ms: float
    npu_ms: float
    simulated_ms: float
    #: the npu with every op on the pure-Python path (the compiled one turned off)
    python_path_ms: float
    #: npu / CPU eager, the median over rounds of the two's times in one round
    npu_ratio_median: float
    #: the npu inside an in-process recording (msprof_py.record: what msprof records)
    recorded_ms: float
    #: recorded npu / CPU eager, the median over rounds
    recorded_ratio_median: float


def _steps(step: Callable[[], torch.Tensor], n: int, sync: bool) -> Callable[[], None]:
    def run() -> None:
        for _ in range(n):
            step()
        if sync:
            torch.npu.synchronize()

    return run


def recorded_steps(step: Callable[[], torch.Tensor], n: int, output: str) -> Callable[[], Span]:
    """A call running ``n`` npu steps inside a recording (``msprof_py.record``, written under
    ``output``), as ``msprof`` records them, once the recording is warm: its span leaves out
    the recording's start, first step (the writer's first chunk: files made, schemas, an
    fsync) and stop, as each mode's warm-up step is left out."""
    run = _steps(step, n, True)

    def recorded() -> Span:
        with msprof_py.record(output, settle=False):
            step()
            torch.npu.synchronize()
            start = time.clock_gettime(time.CLOCK_MONOTONIC)
            run()
            return start, time.clock_gettime(time.CLOCK_MONOTONIC)

    return recorded


def measure(workload: Workload, steps: int, repeats: int) -> StepTimes:
    """Best-of-``repeats`` ms per step over runs of ``steps`` steps: CPU eager, npu, npu
    recorded (:func:`recorded_steps`) and npu's Python path take turns (:func:`turns`);
    torch.profiler's runs come after them, inside one profiling session."""
    cpu_step = workload.build("cpu")
    cpu_step()  # warm-up (also creates the optimizer state)
    npu_step = workload.build("npu")
    npu_step()
    torch.npu.synchronize()
    npu_run = _steps(npu_step, steps, True)

    def python_path_run() -> None:
        with python_path():
            npu_run()

    with tempfile.TemporaryDirectory(prefix="bench_adapter_") as output:
        times = turns(
            {
                "cpu": _steps(cpu_step, steps, False),
                "npu": npu_run,
                "recorded": recorded_steps(npu_step, steps, output),
                "python": python_path_run,
            },
            repeats,
        )
    cpu_ms, npu_ms, recorded_ms, python_path_ms = (
        min(times[k]) / steps * 1e3 for k in ("cpu", "npu", "recorded", "python")
    )

    profiled_step = workload.build("cpu")
    profiled_step()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=True):
        profiled_step()  # warm-up inside the profiler
        profiled_ms = best_of(_steps(profiled_step, steps, False), repeats) / steps * 1e3
    start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
    start.record()
    npu_step()
    end.record()
    end.synchronize()
    return StepTimes(
        cpu_ms,
        profiled_ms,
        npu_ms,
        start.elapsed_time(end),
        python_path_ms,
        median_ratio(times, "npu", "cpu"),
        recorded_ms,
        median_ratio(times, "recorded", "cpu"),
    )


@contextlib.contextmanager
def python_path() -> Iterator[None]:
    """Every op on the pure-Python path meanwhile (what runs where the compiled one is not
    built); the same timeline, so only the real time differs."""
    state = msprof_py.adapter.runtime.STATE
    assert state is not None
    saved, state.native = state.native, False
    try:
        yield
    finally:
        state.native = saved


def _goal(goal: float | None, applies: bool) -> str:
    return f"<= {goal}" if goal is not None and applies else "-"


def step_row(workload: Workload, args: argparse.Namespace) -> str:
    """``workload``'s row of the training steps' table, measured in this process."""
    t = measure(workload, args.steps, args.repeats)
    applies = workload.goals_apply(args.numerics)
    return (
        f"| {workload.name} | {args.numerics} | {t.cpu_ms:.2f} | {t.profiled_ms:.2f} "
        f"| {t.npu_ms:.2f} | {t.recorded_ms:.2f} | {t.profiled_ms / t.cpu_ms:.2f} "
        f"| {t.npu_ms / t.cpu_ms:.2f} | {t.npu_ratio_median:.2f} "
        f"| {_goal(workload.goal, applies)} | {t.recorded_ms / t.cpu_ms:.2f} "
        f"| {t.recorded_ratio_median:.2f} | {_goal(workload.recorded_goal, applies)} "
        f"| {t.python_path_ms / t.cpu_ms:.2f} | {t.simulated_ms:.3f} |"
    )


def child_step_row(workload: Workload, args: argparse.Namespace, numerics: str) -> str:
    """``workload``'s row measured in a child process with ``numerics`` (a process has one
    npu backend, so one numerics), the other settings as this run's."""
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--rows-only",
        f"--workloads={workload.key}",
        f"--numerics={numerics}",
        f"--repeats={args.repeats}",
        f"--steps={args.steps}",
        f"--threads={args.threads}",
    ]
    if args.autograd_device_thread:
        command.append("--autograd-device-thread")
    out = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if out.returncode:
        sys.exit(f"the {numerics} numerics child failed:\n{out.stderr[-2000:]}")
    return next(line for line in out.stdout.splitlines() if line.startswith("| "))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="best of this many runs")
    parser.add_argument("--steps", type=int, default=5, help="training steps per run")
    parser.add_argument("--calls", type=int, default=2000, help="micro-op calls per run")
    parser.add_argument(
        "--numerics",
        choices=("cpu", "fast"),
        default="cpu",
        help="the npu's numerics (fast: low-precision matmuls and convolutions in float32)",
    )
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads (default 1)")
    parser.add_argument(
        "--autograd-device-thread",
        action="store_true",
        help="run the npu's backward on autograd's device thread (torch's default placement)",
    )
    parser.add_argument(
        "--native-floor",
        action="store_true",
        help="also build benchmarks/native_floor.cpp (a C++ fallback doing nothing) and time it",
    )
    parser.add_argument(
        "--workloads",
        default=",".join(w.key for w in WORKLOADS),
        help="the training steps to time, comma-separated (default: all)",
    )
    parser.add_argument(
        "--rows-only",
        action="store_true",
        help="print only the training steps' table rows (what a child run hands back)",
    )
    args = parser.parse_args(argv)
    keys = {w.key for w in WORKLOADS}
    chosen = args.workloads.split(",")
    if not set(chosen) <= keys:
        parser.error(f"--workloads: choose from {', '.join(sorted(keys))}")
    backward = "calling thread"
    if args.autograd_device_thread:  # torch's placement, as the user can ask for it
        os.environ[backward_thread.PLACEMENT_ENV] = "device"
        backward = "autograd's device thread"
    npu = msprof_py.adapter.install(numerics=args.numerics)
    torch.set_num_threads(args.threads)
    workloads = [w for w in WORKLOADS if w.key in chosen]
    if args.rows_only:
        for workload in workloads:
            print(step_row(workload, args))
        return 0
    print(
        f"python {platform.python_version()}, torch {torch.__version__} on {platform.machine()}, "
        f"{args.threads} thread(s), best of {args.repeats}; "
        f"npu: {npu.spec.name}, numerics {args.numerics}, host time modeled, "
        f"npu backward on the {backward}"
    )

    print(f"per-op path: {native.status()}; engine core: {device_native.status()}")
    print(
        "\n| micro-op | CPU (µs/call) | npu (µs/call) | npu / CPU | overhead (µs/call) "
        "| npu, Python path (µs/call) | overhead, Python path |"
        "\n|---|---:|---:|---:|---:|---:|---:|"
    )
    cpu_ops, npu_ops = micro_ops("cpu"), micro_ops("npu")
    cpu_times: dict[str, float] = {}
    for name in cpu_ops:
        cpu_us = cpu_times[name] = per_call_us(cpu_ops[name], args.calls, args.repeats)
        npu_us = per_call_us(npu_ops[name], args.calls, args.repeats)
        with python_path():
            python_us = per_call_us(npu_ops[name], args.calls, args.repeats)
        print(
            f"| {name} | {cpu_us:.2f} | {npu_us:.2f} | {npu_us / cpu_us:.1f} "
            f"| {npu_us - cpu_us:.2f} | {python_us:.2f} | {python_us - cpu_us:.2f} |"
        )
    torch.npu.synchronize()
    floors = {"Python": kernel_floor_us(args.calls * 5, args.repeats)}
    if args.native_floor:
        with tempfile.TemporaryDirectory() as build:  # about a minute of g++ on 2 cores
            floors["C++"] = kernel_floor_us(args.calls * 5, args.repeats, Path(build))
    cpu_add = cpu_times[ADD]  # the floor times the same add
    for kind, floor in floors.items():
        print(
            f"| add through a {kind} kernel that does nothing | {cpu_add:.2f} "
            f"| {floor:.2f} | {floor / cpu_add:.1f} | {floor - cpu_add:.2f} | - | - |"
        )

    print(
        "\n| training step | numerics | CPU eager (ms) | CPU + torch.profiler (ms) | npu (ms) "
        "| npu recorded (ms) | profiler / eager | npu / eager | npu / eager, median of rounds "
        "| goal | recorded / eager | recorded / eager, median of rounds | goal "
        "| npu, Python path / eager | npu simulated step (ms) |"
        "\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    for workload in workloads:
        print(step_row(workload, args), flush=True)
        other = workload.goal_numerics
        if other is not None and other != args.numerics:  # its goals' numerics: a child
            print(child_step_row(workload, args, other), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
