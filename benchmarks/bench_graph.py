"""Graph mode in real time: compile time, and host time per step compiled vs eager.

Two models, ResNet-50 (``sample_runs/resnet50_graph.py``, batch 32 at 224 x 224) and a
12-layer transformer (``sample_runs/train_transformer.py``'s TinyLM: d_model 256, 4 heads,
sequence 128, batch 8), each trained with SGD momentum in one process that records itself as
``msprof`` does (a recording session; the raw profile goes to a temporary directory, no
export). The device runs in shapes-only mode (``--numerics none``, default: no values
computed, so real time is dispatch and simulation, not CPU math) or computes values on the CPU
(``--numerics cpu``). ``--small`` runs small configs with values instead (ResNet-50's depth at
width 16, batch 2 x 64 x 64; TinyLM 4 x d128, sequence 64, batch 4) and adds plain CPU eager
(no npu) as the baseline.

1. **Compile time**: the real seconds of the first compiled step minus a steady compiled step
   (Dynamo tracing, AOTAutograd, the graph runner's import, passes and plans), and the compile
   time the simulation charges on the host clock (``compile graph<N>_*`` host spans: 20 ms per
   graph + 0.2 ms per op node).
2. **Host time per step**: real seconds per steady step of the eager model and of the compiled
   one with the stored-plan replay off (every call interprets the graph node by node through
   the adapter, as the first call does) and on (the default: later calls run one generated host
   function and launch the stored plan, :mod:`msprof_py.graph.replay`), their ratios, and the
   simulated step time of each (the two compiled variants must agree: a warning says if not).
   "replay / eager (CPU time)" divides process CPU seconds instead (the fastest steady step
   of each): on a shared machine real time moves by 2x between runs, CPU time far less.
   ``--profile DIR`` writes a cProfile of one steady step of each compiled variant.

    python benchmarks/bench_graph.py [--steps 3] [--numerics none|cpu] [--small] [--only M]
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
    #: process CPU seconds (all threads) of the fastest steady step: far less sensitive than
    #: real time to other jobs on a shared machine
    steady_cpu_s: float
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


Built = tuple[nn.Module, Callable[[nn.Module], torch.Tensor]]


def _resnet(device: str, batch: int, image: int, width: int, classes: int) -> Built:
    import resnet50_graph

    model = resnet50_graph.ResNet(width=width, num_classes=classes).to(device)
    x = torch.randn(batch, 3, image, image).to(device)
    y = (torch.arange(batch) % classes).to(device)
    return model, lambda m: nn.functional.cross_entropy(m(x), y)


def _tiny_lm(device: str, layers: int, d_model: int, seq: int, batch: int) -> Built:
    import train_transformer

    cfg = train_transformer.Config(vocab_size=1024, seq_len=seq, d_model=d_model, n_layers=layers)
    model = train_transformer.TinyLM(cfg).to(device)
    tokens = (torch.arange(batch * seq).reshape(batch, seq) % cfg.vocab_size).to(device)

    def loss(m: nn.Module) -> torch.Tensor:
        logits = m(tokens)
        return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens.flatten())

    return model, loss


MODELS: dict[str, Callable[[str], Built]] = {
    # ResNet-50 v1.5 at batch 32 x 224 x 224; TinyLM 12 x d256, sequence 128, batch 8
    "resnet50": lambda dev: _resnet(dev, 32, 224, 64, 1000),
    "transformer12": lambda dev: _tiny_lm(dev, 12, 256, 128, 8),
    # small configs for runs with values (CPU eager baseline): ResNet-50's depth at width 16,
    # batch 2 x 64 x 64; TinyLM 4 x d128, sequence 64, batch 4
    "resnet50_small": lambda dev: _resnet(dev, 2, 64, 16, 100),
    "transformer4_small": lambda dev: _tiny_lm(dev, 4, 128, 64, 4),
}
SMALL = ("resnet50_small", "transformer4_small")


#: the variants one row compares: CPU eager (values only), npu eager, npu compiled with the
#: stored-plan replay off (every call interprets the graph node by node through the adapter,
#: as before the replay) and on (the default)
VARIANTS = ("cpu", "eager", "interpreted", "compiled")


def measure(name: str, variant: str, steps: int, profile: str | None = None) -> Timing:
    """Warm-up steps, then ``steps`` timed steps of one model in one variant; with
    ``profile``, one more steady step under cProfile, its statistics written there."""
    import msprof_py.adapter
    from msprof_py.graph import backend, runner

    npu = msprof_py.adapter.current_device()
    backend.reset()
    gc.collect()
    torch.manual_seed(0)
    device = "cpu" if variant == "cpu" else "npu"
    model, loss_of = MODELS[name](device)
    compiled = variant in ("interpreted", "compiled")
    step_model = torch.compile(model, backend="npu") if compiled else model
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    compiles = _Compiles()
    npu.subscribe(compiles)
    runner.set_plan_replay(variant != "interpreted")

    def step() -> tuple[float, int, float]:
        t0, s0, c0 = time.perf_counter(), npu.engine.host_ns, time.process_time()
        opt.zero_grad(set_to_none=True)
        loss_of(step_model).backward()
        opt.step()
        if device == "npu":
            torch.npu.synchronize()
        return time.perf_counter() - t0, npu.engine.host_ns - s0, time.process_time() - c0

    try:
        first, _, _ = step()
        step()  # the second step converts weights to their kernel formats (a re-plan)
        npu.unsubscribe(compiles)
        timed = [step() for _ in range(steps)]
        if profile is not None:
            import cProfile

            profiler = cProfile.Profile()
            profiler.runcall(step)
            profiler.dump_stats(profile)
    finally:
        runner.set_plan_replay(True)
        backend.reset()
    return Timing(
        first,
        min(t for t, _, _ in timed),
        min(c for _, _, c in timed),
        timed[-1][1],
        compiles.ns,
        compiles.graphs,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3, help="timed steady steps (best of)")
    parser.add_argument(
        "--numerics",
        default=None,
        choices=("none", "cpu"),
        help="default: cpu with --small, none otherwise",
    )
    parser.add_argument("--only", choices=sorted(MODELS), action="append")
    parser.add_argument(
        "--small", action="store_true", help=f"the small configs ({', '.join(SMALL)})"
    )
    parser.add_argument(
        "--profile",
        metavar="DIR",
        help="cProfile one steady step of each compiled variant into DIR/<model>_<variant>.prof",
    )
    args = parser.parse_args(argv)
    numerics = args.numerics or ("cpu" if args.small else "none")
    names = args.only or (list(SMALL) if args.small else ["resnet50", "transformer12"])
    torch.set_num_threads(1)
    from msprof_py.collectors.session import SessionConfig, start_session

    out = tempfile.mkdtemp(prefix="bench_graph_")
    session = start_session(SessionConfig(output=out, numerics=numerics, export=False))
    print(
        f"Python {platform.python_version()}, torch {torch.__version__}, numerics "
        f"{numerics}, recording to {out}; best of {args.steps} steady steps"
    )
    variants = VARIANTS if numerics == "cpu" else VARIANTS[1:]
    cpu_cols = "CPU eager s/step | " if numerics == "cpu" else ""
    header = (
        f"| model | {cpu_cols}npu eager s/step | compiled, interpreted s/step | "
        "compiled, plan replay s/step | "
        + ("eager / CPU | compiled / CPU | " if numerics == "cpu" else "")
        + "interpreted / eager | replay / eager | replay / interpreted | "
        "replay / eager (CPU time) | "
        "compile s (real) | compile ms (modelled) | graphs | simulated step ms eager / compiled |"
    )
    print(header)
    ncols = header.count("|") - 1  # the delimiter row has one cell per column
    print("|---" + "|---:" * (ncols - 2) + "|---|")
    for name in names:
        t: dict[str, Timing] = {}
        for variant in variants:
            prof = None
            if args.profile and variant in ("interpreted", "compiled"):
                Path(args.profile).mkdir(parents=True, exist_ok=True)
                prof = str(Path(args.profile) / f"{name}_{variant}.prof")
            t[variant] = measure(name, variant, args.steps, prof)
        graph = t["compiled"]
        if graph.sim_step_ns != t["interpreted"].sim_step_ns:
            print(f"warning: {name}: simulated compiled step differs with the plan replay")
        compile_real = graph.first_s - graph.steady_s
        eager, interp = t["eager"].steady_s, t["interpreted"].steady_s
        cells = [name]
        if numerics == "cpu":
            cells.append(f"{t['cpu'].steady_s:.3f}")
        cells += [f"{eager:.3f}", f"{interp:.3f}", f"{graph.steady_s:.3f}"]
        if numerics == "cpu":
            cpu = t["cpu"].steady_s
            cells += [f"{eager / cpu:.2f}", f"{graph.steady_s / cpu:.2f}"]
        cells += [
            f"{interp / eager:.2f}",
            f"{graph.steady_s / eager:.2f}",
            f"{graph.steady_s / interp:.2f}",
            f"{graph.steady_cpu_s / t['eager'].steady_cpu_s:.2f}",
            f"{compile_real:.2f}",
            f"{graph.modelled_compile_ns / 1e6:.1f}",
            f"{graph.graphs}",
            f"{t['eager'].sim_step_ns / 1e6:.2f} / {graph.sim_step_ns / 1e6:.2f}",
        ]
        print("| " + " | ".join(cells) + " |", flush=True)
    session.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
