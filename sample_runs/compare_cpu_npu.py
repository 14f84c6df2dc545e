"""The transformer sample on CPU (torch.profiler) and on the simulated NPU (msprof), compared.

1. the TinyLM of ``train_transformer.py`` trained on the CPU under ``torch.profiler`` (one
   warm-up step, then ``--steps`` active steps), its Kineto trace written to
   ``OUT/cpu/tinylm.pt.trace.json``;
2. the same script under ``msprof`` on the npu (``OUT/npu``);
3. ``msprof compare OUT/cpu OUT/npu``: the CPU run has no device tasks, so the comparison is a
   projection (CPU host time per op against simulated NPU device time), labelled as such.

    python sample_runs/compare_cpu_npu.py [--out compare_data] [--steps 3] [--json]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import train_transformer  # noqa: E402


def profile_on_cpu(folder: Path, steps: int, batch: int) -> Path:
    """Train on the CPU under torch.profiler; the Kineto trace's path."""
    cfg = train_transformer.Config()
    model = train_transformer.build(cfg, 0)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    tokens, targets = train_transformer.synthetic_tokens(batch, cfg, 0)
    folder.mkdir(parents=True, exist_ok=True)
    trace = folder / "tinylm.pt.trace.json"
    plan = schedule(wait=0, warmup=1, active=steps, repeat=1)
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=plan,
        record_shapes=True,
        on_trace_ready=lambda p: p.export_chrome_trace(str(trace)),
    ) as prof:
        for _ in range(steps + 1):
            train_transformer.train_step(model, opt, tokens, targets)
            prof.step()
    return trace


def msprof(*args: str) -> subprocess.CompletedProcess:
    """Run the msprof CLI of this interpreter."""
    cmd = [sys.executable, "-m", "msprof_py.cli_entry", *args]
    return subprocess.run(cmd, check=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("compare_data"))
    parser.add_argument("--steps", type=int, default=3, help="analysed steps on each side")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")
    args = parser.parse_args(argv)
    if args.out.exists():
        shutil.rmtree(args.out)
    trace = profile_on_cpu(args.out / "cpu", args.steps, args.batch_size)
    print(f"CPU trace: {trace}")
    script = HERE / "train_transformer.py"
    steps = str(args.steps + 1)  # msprof leaves the first step out as warm-up
    run = msprof(f"--output={args.out / 'npu'}", "--no-report", "--export=none", "python",
                 str(script), "--steps", steps, "--batch-size", str(args.batch_size))  # fmt: skip
    if run.returncode != 0:
        return run.returncode
    how = ["--json"] if args.json else []
    return msprof("compare", str(args.out / "cpu"), str(args.out / "npu"), *how).returncode


if __name__ == "__main__":
    sys.exit(main())
