"""A CUDA trace in the published Kineto format, written by hand (times in us), with the answers
the importer must give for it (times in ns from the earliest event)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

PID, TID, GPU = 4242, 4242, 0
GPU_NAME = "NVIDIA H100 80GB HBM3"
SGEMM = "ampere_sgemm_32x32_nn"
RELU = "void at::native::vectorized_elementwise_kernel<4, at::native::relu_kernel>"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
MEMCPY = "Memcpy HtoD (Pinned -> Device)"


def _x(cat: str, name: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": PID,
        "tid": TID,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def _gpu(cat: str, name: str, ts: float, dur: float, stream: int, corr: int, **args: Any) -> dict:
    event = _x(cat, name, ts, dur, stream=stream, correlation=corr, device=GPU, **args)
    return event | {"pid": GPU, "tid": stream}


def _flow(corr: int, launch_ts: float, kernel_ts: float, stream: int) -> list[dict[str, Any]]:
    start = {
        "ph": "s",
        "id": corr,
        "pid": PID,
        "tid": TID,
        "ts": launch_ts,
        "cat": "ac2g",
        "name": "ac2g",
    }
    end = {
        "ph": "f",
        "id": corr,
        "pid": GPU,
        "tid": stream,
        "ts": kernel_ts,
        "cat": "ac2g",
        "name": "ac2g",
        "bp": "e",
    }
    return [start, end]


def _launch(name: str, ts: float, dur: float, corr: int) -> dict[str, Any]:
    return _x("cuda_runtime", name, ts, dur, correlation=corr, cbid=211)


def _memory(ts: float, addr: int, nbytes: int, allocated: int, reserved: int, dev: int) -> dict:
    args = {
        "Addr": addr,
        "Bytes": nbytes,
        "Total Allocated": allocated,
        "Total Reserved": reserved,
        "Device Id": dev,
        "Device Type": 1 if dev >= 0 else 0,
    }
    return {
        "ph": "i",
        "cat": "cpu_instant_event",
        "s": "t",
        "name": "[memory]",
        "pid": PID,
        "tid": TID,
        "ts": ts,
        "args": args,
    }


#: what PyTorch records of an all-reduce of 1,024 float32 values over 2 ranks
COMMS = {"Collective name": "allreduce", "In msg nelems": 1024, "dtype": "Float", "Group size": 2}


def trace(rank: int = 1, world: int = 2, shift_us: float = 0.0) -> dict[str, Any]:
    """Two steps: step 5 (copy in, mm on stream 7, relu on stream 20 linked only by its
    correlation id), step 6 (mm whose kernel runs after the step's host end, an NCCL
    all-reduce on stream 20, a stream synchronize outside any op)."""
    mm_args = {"Input Dims": [[4, 8], [8, 16]], "Input type": ["float", "float"]}
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "ts": 0, "args": {"name": "x"}},
        _x("user_annotation", "ProfilerStep#5", 1000, 100),
        _x("user_annotation", "ProfilerStep#6", 1100, 100),
        # step 5
        _x(
            "cpu_op",
            "aten::copy_",
            1005,
            20,
            **{"Input Dims": [[4, 8], [4, 8], []], "Input type": ["float", "float", "Scalar"]},
        ),
        _memory(1006, 77, 512, 512, 0, -1),  # host allocator: not a memory row
        _launch("cudaMemcpyAsync", 1010, 5, 11),
        _gpu("gpu_memcpy", MEMCPY, 1012, 4, 7, 11, bytes=128),
        *_flow(11, 1010, 1012, 7),
        _x("cpu_op", "aten::mm", 1030, 20, **mm_args, **{"Sequence number": 3}),
        _memory(1031, 1000, 256, 1280, 2097152, 0),
        _launch("cudaLaunchKernel", 1035, 5, 12),
        _gpu("kernel", SGEMM, 1040, 10, 7, 12, grid=[2, 3, 1], block=[128, 1, 1]),
        *_flow(12, 1035, 1040, 7),
        _x("cpu_op", "aten::relu", 1055, 10, **{"Input Dims": [[4, 16]], "Input type": ["float"]}),
        _launch("cudaLaunchKernel", 1058, 3, 13),  # no flow: the correlation id links it
        _gpu("kernel", RELU, 1062, 6, 20, 13, grid=[1, 1, 1]),
        # step 6
        _x("cpu_op", "aten::mm", 1110, 20, **mm_args, **{"Sequence number": 4}),
        _launch("cudaLaunchKernel", 1112, 4, 21),
        _gpu("kernel", SGEMM, 1190, 30, 7, 21, grid=[2, 3, 1]),
        *_flow(21, 1112, 1190, 7),
        _x("cpu_op", "record_param_comms", 1140, 10, **COMMS),
        _launch("cudaLaunchKernel", 1142, 2, 22),
        _gpu("kernel", NCCL, 1150, 25, 20, 22, grid=[2, 1, 1]),
        *_flow(22, 1142, 1150, 20),
        _memory(1160, 1000, -256, 1024, 2097152, 0),
        _launch("cudaStreamSynchronize", 1180, 15, 23),
    ]
    for e in events:
        if e.get("ph") != "M":
            e["ts"] = e["ts"] + shift_us
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": GPU_NAME, "totalGlobalMem": 85_000_000_000}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
        "profile_memory": 1,
        "record_shapes": 1,
        "traceEvents": events,
    }


def write(path: Path, doc: dict[str, Any] | None = None) -> Path:
    """``doc`` (default: :func:`trace`) at ``path`` (gzip-compressed for ``.gz``)."""
    text = json.dumps(doc if doc is not None else trace())
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


#: tasks in launch order: (kind, name, op_type, stream, launch_ns, start_ns, end_ns, wait_ns,
#: step, task_type)
TASKS = [
    ("memcpy", "aten::copy_", "MEMCPY_H2D", 7, 10_000, 12_000, 16_000, 0, 5, "DMA"),
    ("kernel", "aten::mm", SGEMM, 7, 35_000, 40_000, 50_000, 24_000, 5, "AI_CORE"),
    ("kernel", "aten::relu", RELU, 20, 58_000, 62_000, 68_000, 0, 5, "AI_VECTOR_CORE"),
    ("kernel", "aten::mm", SGEMM, 7, 112_000, 190_000, 220_000, 140_000, 6, "AI_CORE"),
    ("collective", "record_param_comms", NCCL, 20, 142_000, 150_000, 175_000, 82_000, 6, "HCCL"),
]
#: steps: (step, start_ns, end_ns)
STEPS = [(5, 0, 100_000), (6, 100_000, 200_000)]
#: device busy (kernels and collectives) per step window: step 5 [0, 100 us), step 6
#: [100 us, 220 us): sgemm 10 + relu 6 us; nccl 25 + sgemm 30 us
BUSY = {5: 16_000, 6: 55_000}
