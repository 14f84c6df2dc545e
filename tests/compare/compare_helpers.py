"""Hand-built runs for the compare tests: two versions of a tiny model, every number known.

Each run has steps 1 and 2 (numbered from 1: no warm-up step is left out), 100 us each on
the host. BASE, per step: ``aten::mm`` (MatMul, 10 us, module ``fc``), ``aten::add`` (Add,
4 us, ``act``), ``aten::convolution`` (Conv2D, 8 us, ``conv``) back to back, then an
allreduce (6 us, 1 MiB, not overlapped); ``aten::mm`` allocates 4 KiB. NEW: the matmul
takes 6 us (``mm_name`` may rename it), ``aten::gelu`` (Gelu, 3 us, ``act``) replaces the
convolution, the allreduce is unchanged; the matmul allocates 2 KiB.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analyzers"))

from analyze_helpers import Builder, save  # noqa: F401

from msprof_py.profile import Profile

US = 1000
STEP = 100 * US
MM_SHAPES = "64,128;128,256"
META = {
    "format_version": 1,
    "status": "completed",
    "soc_version": "Ascend910B2",
    "ai_core_num": 24,
    "aiv_num": 48,
    "aic_frequency_mhz": 1800.0,
    "world_size": 1,
    "hostname": "host",
    "pid": 4242,
    "start_time": "2026-01-02T03:04:05.678",
    "end_time": "2026-01-02T03:04:06.789",
    "env": {},
    "command": "python train.py",
}


def _kernel(start: int, dur: int, op_type: str, task_type: str, **cols: Any) -> dict[str, Any]:
    return {"start": start, "end": start + dur, "op_type": op_type, "task_type": task_type,
            "launch_ns": start, **cols}  # fmt: skip


def run(version: str, mm_name: str = "aten::mm", command: str = "python train.py") -> Profile:
    """The BASE (``version="base"``) or NEW (``"new"``) run."""
    b = Builder(**(META | {"command": command}))
    new = version == "new"
    for step in (1, 2):
        t0 = step * STEP
        b.step(step, t0, t0 + STEP)
        mm_us = 6 if new else 10
        dev = t0 + 2 * US
        b.op(mm_name if new else "aten::mm", t0, t0 + 2 * US,
             [_kernel(dev, mm_us * US, "MatMulV2", "AI_CORE", cube_ns=mm_us * US // 2,
                      input_shapes=MM_SHAPES)],
             step=step, input_shapes=MM_SHAPES, module="Net/Linear", module_path="fc")  # fmt: skip
        dev += mm_us * US
        b.op("aten::add", t0 + 2 * US, t0 + 4 * US,
             [_kernel(dev, 4 * US, "Add", "AI_VECTOR_CORE", vector_ns=2 * US)],
             step=step, input_shapes="64,256;64,256", module="Net/ReLU",
             module_path="act")  # fmt: skip
        dev += 4 * US
        if new:
            b.op("aten::gelu", t0 + 4 * US, t0 + 6 * US,
                 [_kernel(dev, 3 * US, "Gelu", "AI_VECTOR_CORE", vector_ns=2 * US)],
                 step=step, input_shapes="64,256", module="Net/ReLU",
                 module_path="act")  # fmt: skip
            dev += 3 * US
        else:
            b.op("aten::convolution", t0 + 4 * US, t0 + 6 * US,
                 [_kernel(dev, 8 * US, "Conv2D", "AI_CORE", cube_ns=6 * US)],
                 step=step, input_shapes="8,3,32,32;16,3,3,3", module="Net/Conv2d",
                 module_path="conv")  # fmt: skip
            dev += 8 * US
        b.op("c10d::allreduce_", t0 + 6 * US, t0 + 7 * US,
             [_kernel(dev, 6 * US, "hcom_allreduce_", "HCCL", kind="collective",
                      collective="allreduce", bytes=1 << 20, stream_id=1, world_size=2)],
             step=step, input_shapes="256")  # fmt: skip
        size = 2048 if new else 4096
        b.mem(t0 + 1 * US, size, 2 << 20, size=size, tag="aten::mm", step=step)
        b.mem(t0 + 50 * US, 0, 2 << 20, action="free", size=size, tag="aten::mm", step=step)
    return b.build(f"hand-built-{version}")


def host_only_run() -> Profile:
    """A CPU-only trace of the model (host ops, no device task), steps 1 and 2: per step
    ``aten::linear`` [0, 20 us] around ``aten::t`` [1, 2 us] and ``aten::addmm`` [2, 17 us]
    (shapes as BASE's matmul), then ``aten::relu`` [20, 25 us]: 21 us of leaf ops."""
    b = Builder(**(META | {"device": "cpu"}))
    for step in (1, 2):
        t0 = step * STEP
        b.step(step, t0, t0 + STEP)
        b.event("op", "aten::linear", t0, t0 + 20 * US, step=step, input_shapes="64,128")
        b.event("op", "aten::t", t0 + 1 * US, t0 + 2 * US, step=step, input_shapes="256,128")
        b.event("op", "aten::addmm", t0 + 2 * US, t0 + 17 * US, step=step, input_shapes=MM_SHAPES)
        b.event("op", "aten::relu", t0 + 20 * US, t0 + 25 * US, step=step, input_shapes="64,256")
    return b.build("hand-built-cpu")
