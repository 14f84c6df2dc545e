"""How many tasks per second the virtual-time engine schedules (1 and 8 streams).

Each figure is the best of several repeats. To make results comparable across machines, the
same run also measures a baseline: a bare Python loop that builds one TaskRecord per task and
keeps a running end time (the least work any scheduler must do per task). The ratio
engine / baseline is the number to compare between runs; the absolute rates depend on the CPU.

    python benchmarks/bench_engine.py [--tasks N] [--repeats R]
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable

from msprof_py.device import SimulatedNpu, TaskKind, TaskLog, TaskRecord, TaskType
from msprof_py.device.costmodel import Bound, KernelCost


def _kernel(block_dim: int) -> KernelCost:
    return KernelCost(
        TaskType.AI_CORE, block_dim, 5_000, 3_000, 0.0, 0.0, 0.0, 1, Bound.CUBE, 0.0, 0
    )


def baseline(tasks: int) -> None:
    """The floor: one record object and one max() per task, no scheduling."""
    end = 0
    for i in range(tasks):
        start = max(end, i * 16_000)
        end = start + 5_000
        TaskRecord(i, 0, TaskKind.KERNEL, TaskType.AI_CORE, "k", "K", 24, start, start, end, 0)


def engine_run(tasks: int, streams: int, subscribe: bool) -> None:
    npu = SimulatedNpu()
    if subscribe:
        npu.subscribe(TaskLog())
    engine = npu.engine
    stream_list = [engine.default_stream] + [engine.create_stream() for _ in range(streams - 1)]
    cost = _kernel(24 if streams == 1 else 8)
    submit = engine.submit_kernel
    for i in range(tasks):
        submit(stream_list[i % streams], cost, name="k", op_type="K")


def best_rate(fn: Callable[[], None], tasks: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return tasks / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    n, r = args.tasks, args.repeats
    base = best_rate(lambda: baseline(n), n, r)
    rows = [
        ("baseline (record per task, no scheduling)", base),
        ("engine, 1 stream", best_rate(lambda: engine_run(n, 1, False), n, r)),
        ("engine, 8 streams", best_rate(lambda: engine_run(n, 8, False), n, r)),
        ("engine, 1 stream, TaskLog subscribed", best_rate(lambda: engine_run(n, 1, True), n, r)),
        ("engine, 8 streams, TaskLog subscribed", best_rate(lambda: engine_run(n, 8, True), n, r)),
    ]
    print(f"python {platform.python_version()} on {platform.machine()}, {n} tasks, best of {r}")
    print("| workload | tasks/s | ratio to baseline |\n|---|---:|---:|")
    for name, rate in rows:
        print(f"| {name} | {rate:,.0f} | {rate / base:.3f} |")


if __name__ == "__main__":
    main()
