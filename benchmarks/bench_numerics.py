"""What ``numerics="fast"`` saves on mixed-precision models, next to plain CPU eager PyTorch.

An AMP training step (forward under ``torch.autocast(dtype)``, GradScaler for fp16, SGD) of
the ResNet sample (batch 16x3x32x32) and of the AMP sample's MLP (batch 64): CPU float32 eager
(the baseline, in this process), and on the npu with numerics ``cpu`` and ``fast`` (each in a
fresh process: a process has one npu backend). Real ms per step, best of ``--repeats`` runs of
``--steps`` steps, ``torch.set_num_threads(1)``; the ratios to the CPU fp32 step are the figures
to compare between machines. The simulated step time is printed too: it must not depend on the
numerics.

``--vector-ops`` measures instead what widening would give the vector ops ``fast`` leaves alone:
CPU time of each op in the low dtype, in fp32, and widened (inputs to fp32, the fp32 op, the
result rounded back), and whether the widened result is bitwise the low-precision CPU kernel's
on every fp16/bf16 bit pattern (subnormals, infinities and NaNs included).

    python benchmarks/bench_numerics.py [--repeats 3] [--steps 3] [--dtype fp16|bf16]
    python benchmarks/bench_numerics.py --vector-ops [--dtype fp16|bf16]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "sample_runs"))
WORKLOADS = ("resnet", "mlp")


def build(name: str, device: str, dtype: torch.dtype | None) -> Callable[[], None]:
    """One training step of ``name`` on ``device``, under autocast ``dtype`` (None: fp32)."""
    import train_amp
    import train_resnet

    torch.manual_seed(0)
    if name == "resnet":
        model = train_resnet.build(0).to(device)
        x, y = train_resnet.synthetic_batch(16)
    else:
        model = train_amp.MLPClassifier().to(device)
        x, y = torch.randn(64, 1024), torch.randint(0, 100, (64,))
    x, y = x.to(device), y.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler(device, enabled=dtype == torch.float16)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    return step


def best_ms(step: Callable[[], None], steps: int, repeats: int, sync: Callable[[], None]) -> float:
    """Best-of-``repeats`` real ms per step."""
    step()
    sync()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        best = min(best, time.perf_counter() - start)
    return best / steps * 1e3


def npu_child(numerics: str, dtype_name: str, steps: int, repeats: int) -> None:
    """(In a fresh process) the npu rows: real ms per step and the simulated step, as JSON."""
    import msprof_py.adapter

    msprof_py.adapter.install(numerics=numerics)
    torch.set_num_threads(1)
    dtype = getattr(torch, dtype_name)
    out = {}
    for name in WORKLOADS:
        step = build(name, "npu", dtype)
        real = best_ms(step, steps, repeats, torch.npu.synchronize)
        start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        out[name] = {"real_ms": real, "simulated_ms": start.elapsed_time(end)}
    print(json.dumps(out))


def _vector_cases() -> dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]:
    aten = torch.ops.aten
    return {
        "add": lambda a, b: aten.add.Tensor(a, b),
        "mul": lambda a, b: aten.mul.Tensor(a, b),
        "div": lambda a, b: aten.div.Tensor(a, b),
        "add(alpha=0.3)": lambda a, b: aten.add.Tensor(a, b, alpha=0.3),
        "relu": lambda a, b: aten.relu.default(a),
        "threshold_backward": lambda a, b: aten.threshold_backward.default(a, b, 0.0),
        "sqrt": lambda a, b: aten.sqrt.default(a),
        "gelu": lambda a, b: aten.gelu.default(a),
        "_softmax": lambda a, b: aten._softmax.default(a, -1, False),
    }


def _widened(fn: Callable, dtype: torch.dtype) -> Callable:
    return lambda a, b: fn(a.float(), b.float()).to(dtype)


def _bitwise(got: torch.Tensor, want: torch.Tensor) -> str:
    bits = torch.int16
    if torch.equal(got.view(bits), want.view(bits)):
        return "bitwise"
    nan_got, nan_want = got.isnan(), want.isnan()
    if torch.equal(nan_got, nan_want) and torch.equal(got[~nan_got], want[~nan_want]):
        return "bitwise but NaN payloads"
    differ = int((got != want).logical_and(~(nan_got & nan_want)).sum())
    return f"{differ} of {got.numel():,} bit patterns differ"


def vector_ops(dtype: torch.dtype, repeats: int) -> None:
    """The ``--vector-ops`` table (see the module docstring)."""
    torch.manual_seed(0)
    every = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(dtype)
    other = every[torch.randperm(every.numel())]
    x, y = torch.randn(16, 16, 32, 32), torch.randn(16, 16, 32, 32)
    lx, ly = x.to(dtype), y.to(dtype)

    def cpu_ms(fn: Callable, a: torch.Tensor, b: torch.Tensor) -> float:
        fn(a, b)
        best = float("inf")
        for _ in range(max(repeats, 10)):
            start = time.thread_time()
            fn(a, b)
            best = min(best, time.thread_time() - start)
        return best * 1e3

    print(f"{dtype}, 1 thread, 16x16x32x32 inputs, thread CPU time, best of {max(repeats, 10)}\n")
    print(f"| op | {dtype} (ms) | fp32 (ms) | widened (ms) | widened vs {dtype} CPU kernel |")
    print("|---|---:|---:|---:|---|")
    for name, fn in _vector_cases().items():
        wide = _widened(fn, dtype)
        same = _bitwise(wide(every, other), fn(every, other))
        print(f"| {name} | {cpu_ms(fn, lx, ly):.3f} | {cpu_ms(fn, x, y):.3f} "
              f"| {cpu_ms(wide, lx, ly):.3f} | {same} |")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16")
    parser.add_argument("--vector-ops", action="store_true", help="the vector-op table")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    dtype_name = {"fp16": "float16", "bf16": "bfloat16"}[args.dtype]
    if args.vector_ops:
        torch.set_num_threads(1)
        vector_ops(getattr(torch, dtype_name), args.repeats)
        return 0
    if args.child:
        npu_child(args.child, dtype_name, args.steps, args.repeats)
        return 0
    torch.set_num_threads(1)
    cpu = {
        n: best_ms(build(n, "cpu", None), args.steps, args.repeats, lambda: None) for n in WORKLOADS
    }
    npu = {}
    for numerics in ("cpu", "fast"):
        cmd = [sys.executable, __file__, "--child", numerics, "--dtype", args.dtype,
               "--steps", str(args.steps), "--repeats", str(args.repeats)]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        npu[numerics] = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"AMP {args.dtype}, 1 thread, best of {args.repeats} x {args.steps} steps\n")
    print("| training step | CPU fp32 eager (ms) | npu AMP, numerics cpu (ms) | npu AMP, "
          "numerics fast (ms) | cpu / CPU fp32 | fast / CPU fp32 "
          "| simulated step cpu / fast (ms) |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in WORKLOADS:
        slow, fast = npu["cpu"][name], npu["fast"][name]
        print(f"| {name} | {cpu[name]:.1f} | {slow['real_ms']:.1f} | {fast['real_ms']:.1f} "
              f"| {slow['real_ms'] / cpu[name]:.2f} | {fast['real_ms'] / cpu[name]:.2f} "
              f"| {slow['simulated_ms']:.3f} / {fast['simulated_ms']:.3f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
