"""An LSTM over variable-length sequences on the simulated NPU: compile modes and fused kernels.

    python sample_runs/lstm_dynamic.py             # 12 batches of 8 sequences, 8-64 steps long
    python sample_runs/lstm_dynamic.py --quick     # 4 small batches

What the model computes: the forward pass (inference, no gradients) of one LSTM layer
(``--input`` features, ``--hidden`` units) over batches of ``--batch`` sequences with lengths
in ``min_len``..``max_len`` (seeded; similar lengths within a batch, as a length-sorting data
loader gives them, different ones across batches): the hidden state of every valid step of
every sequence, what ``nn.LSTM`` over a ``pack_padded_sequence`` computes. Each batch is one
step; the step time is the simulated time from the step's start until its device work has
finished (the host waits for it), compile and tiling time on the host included. Every variant
starts with an empty op compile cache, as a fresh process does.

Variants:

* **cells**: eager ``nn.LSTMCell`` calls step by step on the sequences still running (sorted
  by length, the active batch shrinks as sequences end): per time step two ``MatMul`` and the
  fused gate kernel, each a separate launch; every active batch size is a new kernel key.
* **npu_lstm**: ``torch_npu.npu_lstm`` over the batch padded to its longest sequence, with the
  padding masked (``flag_seq=True``): ONE ``DynamicRNN`` kernel per batch; every new longest
  length is a new kernel key.
* **npu_lstm + buckets**: the batch padded further to the next of ``--buckets`` fixed lengths
  (GE's dynamic gears recommend 3-4): at most that many keys, at the price of the padded steps'
  FLOPs (the fused kernel computes the whole padded batch at every step).

each with ``torch_npu.npu.set_compile_mode(jit_compile=True)`` (online compile per new key) and
``jit_compile=False`` (binary kernels: host tiling per new key). The costs of a compile and of a
tiling are the device spec's ``[compile]`` figures, estimates marked [U] (no primary source
gives them); the table shows what the model computes from them, not a measured speed-up.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from dataclasses import dataclass

import torch

if not hasattr(torch, "npu"):  # a launcher may have installed the device already
    import msprof_py.adapter

    msprof_py.adapter.install()

import torch_npu

from msprof_py.adapter import runtime


@dataclass(frozen=True)
class Config:
    """Sizes of the run."""

    steps: int = 12
    batch: int = 8
    input: int = 128
    hidden: int = 256
    min_len: int = 8
    max_len: int = 64
    buckets: int = 4
    seed: int = 0


QUICK = Config(steps=4, batch=4, input=16, hidden=32, min_len=3, max_len=12, buckets=3)


@dataclass(frozen=True)
class Result:
    """One variant: step times (ns) and what the compile cache did."""

    name: str
    step_ns: list[int]
    kernels: int
    compiles: int
    tilings: int
    build_ns: int

    @property
    def total_ms(self) -> float:
        return sum(self.step_ns) / 1e6

    @property
    def steady_ms(self) -> float:
        """Mean step time after the first step."""
        rest = self.step_ns[1:] or self.step_ns
        return sum(rest) / len(rest) / 1e6


def batches(cfg: Config) -> list[list[int]]:
    """The sequence lengths of each batch, longest first: as a length-sorting data loader
    gives them, each batch's sequences are of similar length (a length drawn per batch, each
    sequence up to an eighth of the length range shorter), the batches' lengths differ."""
    rng = random.Random(cfg.seed)
    spread = max(0, (cfg.max_len - cfg.min_len) // 8)
    out = []
    for _ in range(cfg.steps):
        top = rng.randint(cfg.min_len, cfg.max_len)
        lengths = [max(cfg.min_len, top - rng.randint(0, spread)) for _ in range(cfg.batch)]
        out.append(sorted(lengths, reverse=True))
    return out


def bucket_lengths(cfg: Config) -> list[int]:
    """``cfg.buckets`` evenly spaced padded lengths up to ``max_len``."""
    return [math.ceil(cfg.max_len * (k + 1) / cfg.buckets) for k in range(cfg.buckets)]


def _padded(lengths: list[int], steps: int, features: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs (steps, batch, features), zero beyond each length, and the (steps, batch) mask."""
    gen = torch.Generator().manual_seed(sum(lengths))
    x = torch.randn(steps, len(lengths), features, generator=gen)
    mask = (torch.arange(steps)[:, None] < torch.tensor(lengths)[None, :]).float()
    return x * mask[..., None], mask


def cells_step(cell: torch.nn.LSTMCell, lengths: list[int], cfg: Config) -> torch.Tensor:
    """One batch through ``cell`` step by step on the active sequences; the last outputs."""
    x, _ = _padded(lengths, lengths[0], cfg.input)
    x = x.npu()
    h = torch.zeros(len(lengths), cfg.hidden).npu()
    c = torch.zeros_like(h)
    for t in range(lengths[0]):
        active = sum(1 for n in lengths if n > t)
        h, c = cell(x[t, :active], (h[:active], c[:active]))
    return h


def fused_step(
    weight: torch.Tensor, bias: torch.Tensor, lengths: list[int], steps: int, cfg: Config
) -> torch.Tensor:
    """One batch as one ``npu_lstm`` call over ``steps`` (>= the longest length)."""
    x, mask = _padded(lengths, steps, cfg.input)
    h0 = torch.zeros(1, len(lengths), cfg.hidden).npu()
    y, *_ = torch_npu.npu_lstm(
        x.npu(), weight, bias, mask.npu(), h0, h0, flag_seq=True, train=False
    )
    return y


def _run(name: str, jit: bool, cfg: Config, step) -> Result:
    state = runtime.state()
    engine = state.npu.engine
    cache = state.compiled
    cache.clear()
    torch_npu.npu.set_compile_mode(jit_compile=jit)
    counter = _KernelCounter()
    state.npu.subscribe(counter)
    times = []
    try:
        with torch.no_grad():
            for lengths in batches(cfg):
                torch.npu.synchronize()
                start = engine.host_ns
                step(lengths)
                torch.npu.synchronize()
                times.append(engine.host_ns - start)
    finally:
        state.npu.unsubscribe(counter)
    s = cache.stats()
    return Result(name, times, counter.kernels, s.compiles, s.tilings, s.compile_ns + s.tiling_ns)


class _KernelCounter:
    """Counts the kernel tasks the device runs."""

    def __init__(self) -> None:
        self.kernels = 0

    def __call__(self, record: object) -> None:
        kind = getattr(record, "kind", None)
        if getattr(kind, "value", None) == "kernel":
            self.kernels += 1


def run(cfg: Config) -> list[Result]:
    """Every variant, in the order of the table."""
    torch.manual_seed(cfg.seed)
    cell = torch.nn.LSTMCell(cfg.input, cfg.hidden).npu()
    weight = torch.cat([cell.weight_ih, cell.weight_hh], 1).t().contiguous().detach()
    bias = (cell.bias_ih + cell.bias_hh).detach()
    gears = bucket_lengths(cfg)

    def gear(n: int) -> int:
        return next(g for g in gears if g >= n)

    variants = [
        ("cells", lambda ls: cells_step(cell, ls, cfg)),
        ("npu_lstm", lambda ls: fused_step(weight, bias, ls, ls[0], cfg)),
        (
            f"npu_lstm + {len(gears)} buckets",
            lambda ls: fused_step(weight, bias, ls, gear(ls[0]), cfg),
        ),
    ]
    results = []
    for name, step in variants:
        for jit in (True, False):
            results.append(_run(f"{name}, jit_compile={jit}", jit, cfg, step))
    return results


def table(results: list[Result], cfg: Config) -> str:
    """The step-time table."""
    head = (
        f"{'variant':<38} {'total ms':>10} {'step 1 ms':>10} {'later ms/step':>14} "
        f"{'kernels/step':>13} {'compiles':>9} {'tilings':>8} {'build ms':>9}"
    )
    lines = [head, "-" * len(head)]
    for r in results:
        lines.append(
            f"{r.name:<38} {r.total_ms:>10.2f} {r.step_ns[0] / 1e6:>10.2f} "
            f"{r.steady_ms:>14.3f} {r.kernels / cfg.steps:>13.1f} {r.compiles:>9} "
            f"{r.tilings:>8} {r.build_ns / 1e6:>9.2f}"
        )
    return "\n".join(lines)


def assumptions(cfg: Config) -> str:
    """What the numbers rest on."""
    spec = runtime.state().npu.spec
    c, d = spec.compile, spec.dispatch
    return "\n".join(
        [
            f"device {spec.name}: default jit_compile={c.jit_compile} "
            f"({spec.source_of('compile.jit_compile')})",
            f"online compile per new kernel key: {c.online_compile_ns / 1e3:.0f} us "
            f"({spec.source_of('compile.online_compile_us')})",
            f"host tiling per new key (binary kernels): {c.tiling_ns / 1e3:.0f} us "
            f"({spec.source_of('compile.tiling_us')})",
            f"every launch: host stage 1 {d.stage1_ns / 1e3:.0f} us, stage 2 "
            f"{d.stage2_ns / 1e3:.0f} us (aclnn GetWorkspaceSize + launch; task queue "
            f"{'on' if d.task_queue else 'off'})",
            f"model: {cfg.batch} sequences per batch, lengths {cfg.min_len}-{cfg.max_len}, "
            f"input {cfg.input}, hidden {cfg.hidden}, {cfg.steps} batches; buckets "
            f"{bucket_lengths(cfg)}",
            "no published timing backs a fixed LSTM speed-up: the ratios below are what this "
            "model computes from the assumptions above",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    """Run every variant and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a few small batches")
    parser.add_argument("--steps", type=int, help="batches (steps)")
    parser.add_argument("--batch", type=int, help="sequences per batch")
    parser.add_argument("--buckets", type=int, help="padded lengths of the bucket variant")
    args = parser.parse_args(argv)
    cfg = QUICK if args.quick else Config()
    over = {k: v for k, v in vars(args).items() if k != "quick" and v is not None}
    if any(v < 1 for v in over.values()):
        parser.error("--steps, --batch and --buckets must be at least 1")
    cfg = Config(**{**cfg.__dict__, **over})
    results = run(cfg)
    print(assumptions(cfg))
    print()
    print(table(results, cfg))
    by = {r.name: r for r in results}
    cells = by["cells, jit_compile=True"]
    fused = by[f"npu_lstm + {cfg.buckets} buckets, jit_compile=False"]
    print()
    print(
        f"modelled: cells with jit compile take {cells.total_ms / fused.total_ms:.1f}x the time "
        f"of the bucketed npu_lstm with binary kernels over these {cfg.steps} batches "
        f"({cells.steady_ms / fused.steady_ms:.1f}x per step after the first)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
