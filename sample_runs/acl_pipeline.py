"""Three-stage copy/compute pipeline on the simulated NPU through the pyACL-shaped API.

The seed article's section 3.1: stream chunks of A to the device on a copy stream, multiply each
by resident weights B on a compute stream (aclnnMatmul), copy the results back on a third stream,
with events between the stages so that chunk i+1 uploads while chunk i computes and chunk i-1
downloads. The serial variant does the same work on one stream. Both report how much of the copy
time was hidden under compute and how busy the AI Cores were, in simulated time.

    python sample_runs/acl_pipeline.py                # both variants, default sizes
    python sample_runs/acl_pipeline.py --verify       # small sizes with real numerics, checked
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

import numpy as np

import msprof_py.acl as acl
from msprof_py.device import TaskLog
from msprof_py.device.tasklog import overlap_length, union_length


@dataclass(frozen=True)
class PipelineResult:
    """Simulated-time figures of one run over the chunk phase (weights upload excluded)."""

    variant: str
    chunks: int
    elapsed_ns: int
    compute_busy_ns: int
    copy_busy_ns: int
    overlapped_ns: int
    max_error: float | None

    @property
    def overlap(self) -> float:
        """Share of copy time that ran while the AI Cores computed."""
        return self.overlapped_ns / self.copy_busy_ns if self.copy_busy_ns else 0.0

    @property
    def utilization(self) -> float:
        """Share of the elapsed time the AI Cores were busy."""
        return self.compute_busy_ns / self.elapsed_ns if self.elapsed_ns else 0.0


def run(
    variant: str = "pipeline",
    *,
    chunks: int = 16,
    rows: int = 1024,
    k: int = 16384,
    n: int = 16384,
    slots: int = 2,
    numerics: bool = False,
    device: str = "ascend910b",
    seed: int = 0,
) -> PipelineResult:
    """Run ``variant`` ("pipeline" or "serial") and return its figures."""
    if variant not in ("pipeline", "serial"):
        raise ValueError(f"unknown variant {variant!r}")
    dtype, item = "float16", 2
    a_bytes, b_bytes, c_bytes = rows * k * item, k * n * item, rows * n * item
    acl.init(device=device, numerics=numerics)
    try:
        acl.rt.set_device(0)
        log = TaskLog()
        acl.current_device().subscribe(log)
        pipelined = variant == "pipeline"
        if pipelined:
            s_in, s_mm, s_out = (acl.rt.create_stream()[0] for _ in range(3))
        else:
            s_in = s_mm = s_out = acl.rt.create_stream()[0]
            slots = 1

        rng = np.random.default_rng(seed)
        b_host = rng.standard_normal((k, n)).astype(np.float16) if numerics else np.zeros(1)
        a_all = rng.standard_normal((chunks, rows, k)).astype(np.float16) if numerics else None
        c_all = np.zeros((chunks, rows, n), np.float16) if numerics else None

        b_dev, _ = acl.rt.malloc(b_bytes, acl.ACL_MEM_MALLOC_HUGE_FIRST)
        if numerics:
            acl.rt.memcpy(
                b_dev,
                b_bytes,
                acl.util.numpy_to_ptr(b_host),
                b_bytes,
                acl.ACL_MEMCPY_HOST_TO_DEVICE,
            )
        else:
            staging, _ = acl.rt.malloc_host(b_bytes)
            acl.rt.memcpy(b_dev, b_bytes, staging, b_bytes, acl.ACL_MEMCPY_HOST_TO_DEVICE)
        window_start = len(log.tasks)

        a_host = [acl.rt.malloc_host(a_bytes)[0] for _ in range(slots)]
        c_host = [acl.rt.malloc_host(c_bytes)[0] for _ in range(slots)]
        a_dev = [acl.rt.malloc(a_bytes)[0] for _ in range(slots)]
        c_dev = [acl.rt.malloc(c_bytes)[0] for _ in range(slots)]
        uploaded = [acl.rt.create_event()[0] for _ in range(slots)]
        computed = [acl.rt.create_event()[0] for _ in range(slots)]
        downloaded = [acl.rt.create_event()[0] for _ in range(slots)]

        for i in range(chunks):
            s = i % slots
            if a_all is not None:
                acl.util.ptr_to_numpy(a_host[s], (rows, k), np.float16)[:] = a_all[i]
            # stage 1: upload chunk i once the matmul that last read this slot is done
            acl.rt.stream_wait_event(s_in, computed[s])
            acl.rt.memcpy_async(
                a_dev[s], a_bytes, a_host[s], a_bytes, acl.ACL_MEMCPY_HOST_TO_DEVICE, s_in
            )
            acl.rt.record_event(uploaded[s], s_in)
            # stage 2: multiply once uploaded and once the last download of this slot is done
            acl.rt.stream_wait_event(s_mm, uploaded[s])
            acl.rt.stream_wait_event(s_mm, downloaded[s])
            acl.op.matmul(a_dev[s], b_dev, c_dev[s], rows, n, k, dtype, s_mm)
            acl.rt.record_event(computed[s], s_mm)
            # stage 3: download the result
            acl.rt.stream_wait_event(s_out, computed[s])
            acl.rt.memcpy_async(
                c_host[s], c_bytes, c_dev[s], c_bytes, acl.ACL_MEMCPY_DEVICE_TO_HOST, s_out
            )
            acl.rt.record_event(downloaded[s], s_out)
            if c_all is not None:
                acl.rt.synchronize_event(downloaded[s])
                c_all[i] = acl.util.ptr_to_numpy(c_host[s], (rows, n), np.float16)
        acl.rt.synchronize_device()

        max_error = None
        if a_all is not None and c_all is not None:
            expected = (a_all.astype(np.float32) @ b_host.astype(np.float32)).astype(np.float16)
            max_error = float(
                np.max(np.abs(expected.astype(np.float32) - c_all.astype(np.float32)))
            )

        window = log.tasks[window_start:]
        kernels = TaskLog.intervals(t for t in window if t.op_type == "MatMul")
        copies = TaskLog.intervals(t for t in window if t.op_type.startswith("MEMCPY"))
        busy = [(t.start_ns, t.end_ns) for t in window if t.end_ns > t.start_ns]
        elapsed = max(e for _, e in busy) - min(s for s, _ in busy)
        return PipelineResult(
            variant=variant,
            chunks=chunks,
            elapsed_ns=elapsed,
            compute_busy_ns=union_length(kernels),
            copy_busy_ns=union_length(copies),
            overlapped_ns=overlap_length(kernels, copies),
            max_error=max_error,
        )
    finally:
        acl.finalize()


def _report(results: list[PipelineResult]) -> str:
    lines = [
        f"{'variant':<10}{'chunks':>7}{'time (ms)':>12}{'copy/compute overlap':>23}"
        f"{'AI Core utilisation':>22}"
    ]
    for r in results:
        lines.append(
            f"{r.variant:<10}{r.chunks:>7}{r.elapsed_ns / 1e6:>12.3f}{r.overlap:>23.1%}"
            f"{r.utilization:>22.1%}"
        )
    if len(results) == 2 and results[0].elapsed_ns:
        lines.append(f"pipeline speed-up: {results[1].elapsed_ns / results[0].elapsed_ns:.2f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=16)
    parser.add_argument("--rows", type=int, default=1024, help="rows of A per chunk")
    parser.add_argument("--k", type=int, default=16384, help="inner dimension")
    parser.add_argument("--n", type=int, default=16384, help="columns of B")
    parser.add_argument("--device", default="ascend910b", help="device preset or spec file")
    parser.add_argument(
        "--verify",
        action="store_true",
        help="small sizes with real numerics; check the results against numpy",
    )
    args = parser.parse_args(argv)
    sizes = dict(chunks=args.chunks, rows=args.rows, k=args.k, n=args.n, device=args.device)
    if args.verify:
        sizes.update(chunks=4, rows=64, k=256, n=128)
    print(
        f"simulated device {args.device}: {sizes['chunks']} chunks of "
        f"[{sizes['rows']}x{sizes['k']}] @ [{sizes['k']}x{sizes['n']}] fp16"
    )
    results = [run(v, numerics=args.verify, **sizes) for v in ("pipeline", "serial")]
    print(_report(results))
    if args.verify:
        errors = [r.max_error for r in results]
        print(f"max |error| vs numpy: {max(e or 0.0 for e in errors):.3g}")
        if any(e is None or e > 0.0 for e in errors):
            print("verification FAILED", file=sys.stderr)
            return 1
        print("verification passed: device results equal numpy's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
