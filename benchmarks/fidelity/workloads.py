"""One fidelity case, run in shapes-only mode in this process (``python -m`` from the bench).

Each function installs the npu with ``numerics="none"`` on the case's preset, runs the
workload, and returns the simulated figures. Step times are simulated (virtual) time between
two device synchronisations; nothing here reads a computed value (no ``.item()``).
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch

import msprof_py.adapter
from msprof_py.device import TaskKind
from msprof_py.device.collectives import collective_cost
from msprof_py.device.costmodel import copy_ns, matmul_cost
from msprof_py.device.records import CopyKind
from msprof_py.device.spec import DeviceSpec

_STEPS = 3  # step 1 warms the allocator (and DDP rebuilds its buckets); the last is measured


def gemm(case: dict[str, Any]) -> dict[str, Any]:
    """TFLOPS of one BF16 mm on the device, as mamf-finder times it (kernel time)."""
    spec = DeviceSpec.preset(case["preset"])
    npu = msprof_py.adapter.install(numerics="none", device=case["preset"])
    m, n, k = case["shape"]
    a = torch.empty(m, k, dtype=torch.bfloat16, device="npu")
    b = torch.empty(k, n, dtype=torch.bfloat16, device="npu")
    kernels: list[Any] = []
    npu.subscribe(lambda r: kernels.append(r) if getattr(r, "op_type", "") == "MatMul" else None)
    torch.mm(a, b)
    torch.npu.synchronize()
    duration = kernels[-1].end_ns - kernels[-1].start_ns
    expected = matmul_cost(spec, m, n, k, dtype="bfloat16").duration_ns
    assert duration == expected, (duration, expected)
    return {"value": 2 * m * n * k / duration / 1e3}


def gemm_best(case: dict[str, Any]) -> dict[str, Any]:
    """Best simulated TFLOPS over the published shapes and 8192^3 (the sweep's best shape is
    not printed)."""
    spec = DeviceSpec.preset(case["preset"])
    shapes = [(6912, 16384, 2048), (2304, 5120, 1536), (6144, 17920, 2816), (14336, 4096, 4096)]
    shapes.append((8192, 8192, 8192))
    best = max(
        2 * m * n * k / matmul_cost(spec, m, n, k, dtype="bfloat16").duration_ns / 1e3
        for m, n, k in shapes
    )
    return {"value": best}


def hbm_copy(case: dict[str, Any]) -> dict[str, Any]:
    """Read + write bandwidth of a 1 GiB device-to-device copy."""
    spec = DeviceSpec.preset(case["preset"])
    nbytes = 1 << 30
    return {"value": 2 * nbytes / copy_ns(spec, CopyKind.D2D, nbytes)}


def h2d(case: dict[str, Any]) -> dict[str, Any]:
    """Bandwidth of a 256 MiB pinned host-to-device copy (its DMA task, latency included)."""
    npu = msprof_py.adapter.install(numerics="none", device=case["preset"])
    host = torch.empty(64 << 20, dtype=torch.float32).pin_memory()
    copies: list[Any] = []
    npu.subscribe(
        lambda r: copies.append(r) if getattr(r, "kind", None) is TaskKind.MEMCPY else None
    )
    host.to("npu", non_blocking=True)
    torch.npu.synchronize()
    task = copies[-1]
    return {"value": (256 << 20) / (task.end_ns - task.start_ns)}


def allreduce(case: dict[str, Any]) -> dict[str, Any]:
    """hccl_test's algbw (size / time) and busbw (algbw x 2(n-1)/n) of one all-reduce."""
    spec = DeviceSpec.preset(case["preset"])
    cost = collective_cost(spec.hccl, "allreduce", case["bytes"], case["ranks"])
    algbw = case["bytes"] / cost.duration_ns
    p = case["ranks"]
    return {"value": algbw, "busbw": algbw * 2 * (p - 1) / p, "algorithm": cost.algorithm}


def _train(model: torch.nn.Module, batch_fn: Any, amp: bool, steps: int, opt: Any) -> dict:
    npu = msprof_py.adapter.current_device()
    scaler = torch.amp.GradScaler("npu", enabled=amp)
    loss_fn = torch.nn.functional.cross_entropy
    times, walls = [], []
    for _ in range(steps):
        inputs, target = batch_fn()
        torch.npu.synchronize()
        start, wall = npu.engine.host_ns, time.perf_counter()
        with torch.autocast("npu", dtype=torch.float16, enabled=amp):
            out = model(*inputs)
            loss = loss_fn(out, target) if not isinstance(out, tuple) else _bert_loss(out, target)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        torch.npu.synchronize()
        times.append(npu.engine.host_ns - start)
        walls.append(time.perf_counter() - wall)
    return {
        "step_ns": times[-1],
        "steps_ns": times,
        "wall_s": walls[-1],
        "peak_bytes": torch.npu.max_memory_allocated(),
    }


def _bert_loss(out: tuple[torch.Tensor, torch.Tensor], target: Any) -> torch.Tensor:
    logits, nsp = out
    mlm, nsp_label = target
    mlm_loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), mlm.flatten())
    return mlm_loss + torch.nn.functional.cross_entropy(nsp, nsp_label)


def resnet50(case: dict[str, Any]) -> dict[str, Any]:
    """ResNet-50 v1.5 training steps (SGD momentum, optional AMP + GradScaler).

    With ``graph = true`` the model runs compiled, ``torch.compile(model, backend="npu")``
    (GE-style fusion, one launch per forward and per backward graph; the loss and the SGD
    update stay eager), as ``sample_runs/resnet50_graph.py`` runs it; step 1 compiles, the
    last step is measured."""
    from fidelity.models import ResNet50

    msprof_py.adapter.install(numerics="none", device=case["preset"])
    torch.manual_seed(0)
    model = ResNet50().to("npu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    step_model = torch.compile(model, backend="npu") if case.get("graph") else model
    bs = case["batch"]
    x = torch.empty(bs, 3, 224, 224).to("npu")
    y = torch.zeros(bs, dtype=torch.long).to("npu")
    res = _train(step_model, lambda: ((x,), y), case["amp"], case.get("steps", _STEPS), opt)
    res["value"] = bs / (res["step_ns"] * 1e-9)
    return res


def bert_large(case: dict[str, Any]) -> dict[str, Any]:
    """BERT-Large pre-training steps: MLM on 20 masked positions per sequence, NSP, AdamW."""
    from fidelity.models import BertLarge

    msprof_py.adapter.install(numerics="none", device=case["preset"])
    torch.manual_seed(0)
    model = BertLarge().to("npu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    bs, seq, picks = case["batch"], case["seq"], 20
    ids = torch.zeros(bs, seq, dtype=torch.long).to("npu")
    types = torch.zeros(bs, seq, dtype=torch.long).to("npu")
    positions = torch.arange(seq).expand(bs, seq).contiguous().to("npu")
    masked = torch.arange(picks).expand(bs, picks).contiguous().to("npu")
    mlm = torch.zeros(bs, picks, dtype=torch.long).to("npu")
    nsp = torch.zeros(bs, dtype=torch.long).to("npu")
    batch = ((ids, types, positions, masked), (mlm, nsp))
    res = _train(model, lambda: batch, case["amp"], case.get("steps", _STEPS), opt)
    res["value"] = bs / (res["step_ns"] * 1e-9)
    return res


def resnet50_ddp_rank(case: dict[str, Any]) -> dict[str, Any]:
    """One rank of 8-rank DDP ResNet-50 (run under torchrun): step time and bucket counts."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import msprof_py.adapter.distributed as hccl
    from fidelity.models import ResNet50

    npu = msprof_py.adapter.install(numerics="none", device=case["preset"])
    hccl.register()
    local = int(os.environ["LOCAL_RANK"])
    torch.npu.set_device(local)
    dist.init_process_group("hccl")
    torch.manual_seed(0)
    model = DDP(ResNet50().to("npu"), device_ids=[local])
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    per_step: list[int] = []
    allreduces: list[int] = [0]

    def count(record: Any) -> None:
        if getattr(record, "kind", None) is TaskKind.COLLECTIVE:
            allreduces[-1] += 1

    npu.subscribe(count)
    bs = case["batch"]
    x = torch.empty(bs, 3, 224, 224).to("npu")
    y = torch.zeros(bs, dtype=torch.long).to("npu")
    scaler = torch.amp.GradScaler("npu", enabled=case["amp"])
    for _ in range(_STEPS):
        torch.npu.synchronize()
        start = npu.engine.host_ns
        with torch.autocast("npu", dtype=torch.float16, enabled=case["amp"]):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        torch.npu.synchronize()
        per_step.append(npu.engine.host_ns - start)
        allreduces.append(0)
    dist.destroy_process_group()
    return {"steps_ns": per_step, "hccl_tasks": allreduces[:-1], "rank": local}
