"""What recording costs on top of the npu adapter: wall time, recorder memory, bytes on disk.

1. Whole-run wall time of a sample script run directly (adapter only: it installs the device
   itself) and under ``msprof`` (adapter + recording + export), taking turns, best of N.
2. A long run of small ops (``--ops`` device ops) in one process, without and with a recording
   session: peak RSS of each (the recorder flushes in bounded chunks, so the difference must not
   grow with the run), and the raw profile's bytes on disk, scaled to one million tasks. The
   four processes (CPU eager, torch.profiler, npu, npu recorded) run in turns for
   ``--long-rounds`` rounds: loop times are each mode's best, a cost per op the median over
   rounds of the difference within a round (one run each moved it by a third between runs).

    python benchmarks/bench_recording.py [--repeats 3] [--ops 200000] [--long-rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_runs" / "train_resnet.py"
sys.path.insert(0, str(ROOT / "benchmarks"))

from peak import PEAK_MIB  # noqa: E402

LONG_RUN = (
    PEAK_MIB
    + """
import contextlib, json, resource, sys, tempfile, time
from pathlib import Path
import torch
mode = sys.argv[1]
record = mode == "record"
ops = int(sys.argv[2])
out = tempfile.mkdtemp()
device = "cpu" if mode in ("cpu", "profiler") else "npu"
profiler = contextlib.nullcontext()
if record:
    from msprof_py.collectors.session import SessionConfig, start_session
    session = start_session(SessionConfig(output=out, export=False))
elif mode == "plain":
    import msprof_py.adapter
    msprof_py.adapter.install()
elif mode == "profiler":
    from torch.profiler import ProfilerActivity, profile
    profiler = profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=True)
torch.set_num_threads(1)
x = torch.randn(64, device=device)
with profiler:
    t0 = time.perf_counter()
    for i in range(ops // 2):
        x = (x * 0.5).add_(1.0)
        if i % 1000 == 999 and device == "npu":
            import msprof_py
            msprof_py.step()
    elapsed = time.perf_counter() - t0
raw_bytes = 0
if record:
    run = session.stop()
    raw_bytes = sum(p.stat().st_size for p in (run / "msprof_raw").iterdir())
rss_mb = peak_mib()
print(json.dumps({"elapsed": elapsed, "rss_mb": rss_mb, "raw_bytes": raw_bytes}))
"""
)


def best_walls(commands: list[list[str]], repeats: int, cwd: Path) -> list[float]:
    """The shortest wall time of each command over ``repeats`` runs, the commands taking
    turns (each best comes from the same stretch of a drifting VM's speed)."""
    best = [float("inf")] * len(commands)
    for _ in range(repeats):
        for i, command in enumerate(commands):
            t0 = time.perf_counter()
            subprocess.run(command, cwd=cwd, check=True, capture_output=True)
            best[i] = min(best[i], time.perf_counter() - t0)
    return best


def long_run(mode: str, ops: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", LONG_RUN, mode, str(ops)], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--ops", type=int, default=200_000)
    parser.add_argument(
        "--long-rounds", type=int, default=3, help="rounds of the long runs, the modes in turns"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        direct, msprof = best_walls(
            [
                [sys.executable, str(SAMPLE), f"--steps={args.steps}"],
                [
                    sys.executable,
                    "-m",
                    "msprof_py.cli_entry",
                    "--output=out",
                    "--no-report",
                    "python",
                    str(SAMPLE),
                    f"--steps={args.steps}",
                ],
            ],
            args.repeats,
            work,
        )
    print(f"python {sys.version.split()[0]}; best of {args.repeats}")
    print("| run | wall time (s) | ratio |\n|---|---:|---:|")
    print(f"| train_resnet.py --steps {args.steps}, adapter only | {direct:.2f} | 1.00 |")
    print(f"| same under msprof (record + export) | {msprof:.2f} | {msprof / direct:.2f} |")
    modes = ("cpu", "profiler", "plain", "record")
    rounds = [{mode: long_run(mode, args.ops) for mode in modes} for _ in range(args.long_rounds)]
    # each mode's fastest loop (its peak RSS from the same run), and each cost per op as the
    # median over rounds of the difference within one round (the processes of a round run
    # one after the other, in the same stretch of a drifting VM's speed)
    runs = {mode: min((r[mode] for r in rounds), key=lambda run: run["elapsed"]) for mode in modes}
    plain, recorded = runs["plain"], runs["record"]

    def cost_us(mode: str, base: str) -> list[float]:
        """``mode``'s cost per op over ``base``'s in each round."""
        return [(r[mode]["elapsed"] - r[base]["elapsed"]) / args.ops * 1e6 for r in rounds]

    per_million = recorded["raw_bytes"] / args.ops * 1e6
    print(f"\nlong run: {args.ops} small ops in one process, best of {args.long_rounds} rounds")
    print("| | loop time (s) | µs per op | peak RSS (MB) |\n|---|---:|---:|---:|")
    for mode, label in (
        ("cpu", "CPU eager"),
        ("profiler", "CPU + torch.profiler (shapes, flops)"),
        ("plain", "npu, adapter only"),
        ("record", "npu, recording"),
    ):
        run = runs[mode]
        print(
            f"| {label} | {run['elapsed']:.1f} | {run['elapsed'] / args.ops * 1e6:.1f} "
            f"| {run['rss_mb']:.0f} |"
        )
    recording = cost_us("record", "plain")
    each = ", ".join(f"{us:.1f}" for us in recording)
    print(
        f"\nrecording costs {statistics.median(recording):.1f} µs per op (goal: 3; the median of "
        f"rounds: {each}); torch.profiler costs "
        f"{statistics.median(cost_us('profiler', 'cpu')):.1f} µs per op"
    )
    print(
        f"\nrecording overhead on the loop: {recorded['elapsed'] / plain['elapsed']:.2f}x; "
        f"recorder memory: {recorded['rss_mb'] - plain['rss_mb']:.0f} MB; raw profile on "
        f"disk: {per_million / 2**20:.0f} MiB per million tasks"
    )


if __name__ == "__main__":
    main()
