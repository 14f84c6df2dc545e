"""Graph mode in real time: compile time, and host time per step compiled vs eager.

Two models, ResNet-50 (``sample_runs/resnet50_graph.py``, batch 32 at 224 x 224) and a
12-layer transformer (``sample_runs/train_transformer.py``'s TinyLM: d_model 256, 4 heads,
sequence 128, batch 8), each trained with SGD momentum in one process that records itself as
``msprof`` does (a recording session; the raw profile goes to a temporary directory, no
export). The device runs in shapes-only mode (``--numerics none``, default: no values
computed, so real time is dispatch and simulation, not CPU math) or computes values on the CPU
(``--numerics cpu``).

1. **Compile time**: the real seconds of the first compiled step minus a steady compiled step
   (Dynamo tracing, AOTAutograd, the graph runner's import, passes and plans), and the compile
   time the simulation charges on the host clock (``compile graph<N>_*`` host spans: 20 ms per
   graph + 0.2 ms per op node).
2. **Host time per step**: real seconds per steady step of the eager model (the baseline,
   measured in the same run) and of the compiled one, their ratio, and the simulated step
   time of each. The compiled step does not skip the per-op host work: the runner still
   executes every ATen node of the graph through the adapter (values, or meta shapes, node by
   node) to know its outputs and kernels; what it saves is Dynamo-free eager Python
   (``nn.Module`` calls, autograd's per-op bookkeeping) and one engine launch per kernel.

    python benchmarks/bench_graph.py [--steps 3] [--numerics none|cpu] [--only resnet50]
"""

from __future__ import annotations

import argparse
import gc
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "sample_runs"))


@dataclass
class Timing:
    """Real and simulated time of one model, eager or compiled."""

    first_s: float
    steady_s: float
    sim_step_ns: int
    modelled_compile_ns: int
    graphs: int


class _Compiles:
    """Sums the host spans the runner charges for compiling graphs."""

    def __init__(self) -> None:
        self.ns = 0
        self.graphs = 0

    def __call__(self, record: Any) -> None:
        if getattr(getattr(record, "kind", None), "value", "") == "api" and record.name.startswith(
            "compile "
        ):
            self.ns += record.end_ns - record.start_ns
            self.graphs += 1


def _resnet50() -> tuple[nn.Module, Callable[[nn.Module], torch.Tensor]]:
    import resnet50_graph

    model = resnet50_graph.ResNet().to("npu")
    x = torch.empty(32, 3, 224, 224).to("npu")
    y = torch.zeros(32, dtype=torch.long).to("npu")
    return model, lambda m: nn.functional.cross_entropy(m(x), y)


def _transformer() -> tuple[nn.Module, Callable[[nn.Module], torch.Tensor]]:
    import train_transformer

    cfg = train_transformer.Config(vocab_size=1024, seq_len=128, d_model=256, n_layers=12)
    model = train_transformer.TinyLM(cfg).to("npu")
    tokens = torch.zeros(8, cfg.seq_len, dtype=torch.long).to("npu")

    def loss(m: nn.Module) -> torch.Tensor:
        logits = m(tokens)
        return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens.flatten())

    return model, loss


MODELS = {"resnet50": _resnet50, "transformer12": _transformer}


def measure(name: str, compiled: bool, steps: int) -> Timing:
    """Warm-up steps, then ``steps`` timed steps of one model, eager or compiled."""
    import msprof_py.adapter
    from msprof_py.graph import backend

    npu = msprof_py.adapter.current_device()
    backend.reset()
    gc.collect()
    torch.manual_seed(0)
    model, loss_of = MODELS[name]()
    step_model = torch.compile(model, backend="npu") if compiled else model
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    compiles = _Compiles()
    npu.subscribe(compiles)

    def step() -> tuple[float, int]:
        t0, s0 = time.perf_counter(), npu.engine.host_ns
        opt.zero_grad(set_to_none=True)
        loss_of(step_model).backward()
        opt.step()
        torch.npu.synchronize()
        return time.perf_counter() - t0, npu.engine.host_ns - s0

    first, _ = step()
    step()  # the second step converts weights to their kernel formats (a re-plan when compiled)
    npu.unsubscribe(compiles)
    timed = [step() for _ in range(steps)]
    backend.reset()
    return Timing(
        first,
        min(t for t, _ in timed),
        timed[-1][1],
        compiles.ns,
        compiles.graphs,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3, help="timed steady steps (best of)")
    parser.add_argument("--numerics", default="none", choices=("none", "cpu"))
    parser.add_argument("--only", choices=sorted(MODELS), action="append")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    from msprof_py.collectors.session import SessionConfig, start_session

    out = tempfile.mkdtemp(prefix="bench_graph_")
    session = start_session(SessionConfig(output=out, numerics=args.numerics, export=False))
    print(
        f"Python {platform.python_version()}, torch {torch.__version__}, numerics "
        f"{args.numerics}, recording to {out}; best of {args.steps} steady steps"
    )
    print(
        "| model | eager s/step (baseline) | compiled s/step | compiled / eager | "
        "first compiled step s | compile s (real) | compile ms (modelled) | graphs | "
        "simulated step ms eager / compiled |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for name in args.only or sorted(MODELS):
        eager = measure(name, False, args.steps)
        graph = measure(name, True, args.steps)
        compile_real = graph.first_s - graph.steady_s
        print(
            f"| {name} | {eager.steady_s:.3f} | {graph.steady_s:.3f} | "
            f"{graph.steady_s / eager.steady_s:.2f} | {graph.first_s:.2f} | {compile_real:.2f} | "
            f"{graph.modelled_compile_ns / 1e6:.1f} | {graph.graphs} | "
            f"{eager.sim_step_ns / 1e6:.2f} / {graph.sim_step_ns / 1e6:.2f} |",
            flush=True,
        )
    session.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
