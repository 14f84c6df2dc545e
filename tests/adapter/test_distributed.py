"""The ``hccl`` process-group backend: values over gloo, HCCL tasks on each rank's device.

Multi-rank tests start fresh processes (``mp.spawn``, torchrun, or one process per rank with
``env://``); each rank writes what it saw to a JSON file that the test checks.
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

import msprof_py.adapter.distributed as hccl
from msprof_py.adapter import native
from msprof_py.device import DeviceSpec, SimulatedNpu, TaskLog, TaskType
from msprof_py.device.collectives import collective_cost

ROOT = Path(__file__).resolve().parents[2]
SPEC = DeviceSpec.load("ascend910b")
_LAUNCH_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment for a child: no launcher variables of ours, the repo importable."""
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCH_ENV}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def _write(tmp_path: Path, name: str, code: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(code), encoding="utf-8")
    return path


def _run(cmd: list[str], env: dict[str, str], timeout: int = 90) -> str:
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"exit {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr[-6000:]}"
    return out.stdout


def _results(folder: Path, world: int = 2) -> list[dict[str, Any]]:
    return [json.loads((folder / f"rank{r}.json").read_text()) for r in range(world)]


def _torchrun() -> list[str]:
    exe = Path(sys.executable).parent / "torchrun"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "torch.distributed.run"]


# ---- in this process: registration, a one-rank group ---------------------------------------


def test_register_is_idempotent_and_a_one_rank_group_costs_nothing(
    npu: SimulatedNpu, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    hccl.register()
    hccl.register()
    assert hccl.is_registered() and "hccl" in dist.Backend.backend_list
    assert dist.Backend.default_device_backend_map["npu"] == "hccl"
    log = TaskLog()
    npu.subscribe(log)
    dist.init_process_group("hccl", store=dist.HashStore(), rank=0, world_size=1)
    try:
        assert dist.get_backend() == "hccl"
        t = torch.arange(6.0, device="npu")
        dist.all_reduce(t)
        assert t.cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
        cpu = torch.ones(2)
        dist.all_reduce(cpu)  # CPU tensors pass through to gloo, no device task
        assert cpu.tolist() == [1.0, 1.0]
    finally:
        dist.destroy_process_group()
        npu.unsubscribe(log)
    tasks = [t for t in log.tasks if t.task_type is TaskType.HCCL]
    assert [(t.name, t.bytes, t.duration_ns) for t in tasks] == [("hcom_allreduce_", 24, 0)]
    assert tasks[0].stream_id != npu.engine.default_stream.stream_id


# ---- two ranks under mp.spawn: every collective, its tasks and their times ------------------

_COLLECTIVES = """
import json, sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world, port, out):
    import msprof_py.adapter
    import msprof_py.adapter.distributed as hccl
    from msprof_py.device import TaskLog, TaskType

    npu = msprof_py.adapter.install()
    hccl.register()
    hccl.register()
    engine = npu.engine
    log = TaskLog()
    npu.subscribe(log)
    dist.init_process_group(
        "hccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
        timeout=timedelta(seconds=30),
    )
    res = {"current_device": torch.npu.current_device(), "backend": dist.get_backend(),
           "default_stream": engine.default_stream.stream_id}

    def full(n, v, dtype=torch.float32):
        return torch.full((n,), v, dtype=dtype, device="npu")

    t = full(1000, rank + 1.0); dist.all_reduce(t); res["sum"] = sorted(set(t.cpu().tolist()))
    t = full(1000, rank + 1.0); dist.all_reduce(t, op=dist.ReduceOp.AVG)
    res["avg"] = sorted(set(t.cpu().tolist()))
    t = full(1000, rank + 1.0); dist.all_reduce(t, op=dist.ReduceOp.MAX)
    res["max"] = sorted(set(t.cpu().tolist()))
    t = full(1000, rank + 1.0); dist.all_reduce(t, op=dist.ReduceOp.MIN)
    res["min"] = sorted(set(t.cpu().tolist()))
    t = full(1000, rank + 5, torch.int64); dist.all_reduce(t)
    res["int_sum"] = sorted(set(t.cpu().tolist()))
    outs = [torch.empty(300, device="npu") for _ in range(world)]
    dist.all_gather(outs, full(300, rank + 1.0))
    res["all_gather"] = [sorted(set(o.cpu().tolist())) for o in outs]
    gathered = torch.empty(400, device="npu")
    gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    gather_single(gathered, full(200, rank + 1.0))
    res["all_gather_single"] = gathered.cpu().tolist()
    shard = torch.empty(128, device="npu")
    scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    scatter_single(shard, torch.arange(256.0, device="npu") + 1000 * rank)
    res["reduce_scatter_single"] = shard.cpu().tolist()
    part = torch.empty(64, device="npu")
    dist.reduce_scatter(part, [full(64, 10.0 * i + rank) for i in range(world)])
    res["reduce_scatter"] = sorted(set(part.cpu().tolist()))
    b = full(50, rank + 7.0); dist.broadcast(b, src=1)
    res["broadcast"] = sorted(set(b.cpu().tolist()))
    cpu = torch.full((3,), rank + 1.0); dist.all_reduce(cpu); res["cpu_sum"] = cpu.tolist()
    dist.barrier()
    res["host_after_barrier"] = engine.host_ns
    res["names"] = [(t.name, t.bytes) for t in log.tasks if t.task_type is TaskType.HCCL]

    # a slow host on rank 1 delays the collective on both ranks
    if rank == 1:
        engine.advance_host(2_000_000, "slow rank")
    res["host_before_slow"] = engine.host_ns
    t = full(16, 1.0); dist.all_reduce(t)
    # compute queued before a collective comes first: the HCCL task waits for it
    if rank == 0:
        a = torch.randn(1024, 1024).to("npu")
        a = a @ a
        res["matmul_end"] = engine.default_stream.tail_ns
    else:
        a = torch.zeros(1024, 1024, device="npu")
    dist.all_reduce(a)
    # a big all-reduce: the host goes on, the current stream waits, synchronize waits
    big = full(4 * 1024 * 1024, 1.0)
    dist.all_reduce(big)
    res["host_after_big"] = engine.host_ns
    res["default_tail_after_big"] = engine.default_stream.tail_ns
    torch.npu.synchronize()
    res["host_after_sync"] = engine.host_ns
    res["big_ok"] = bool((big.cpu() == 2.0).all())
    res["hccl"] = [
        {"name": t.name, "stream": t.stream_id, "bytes": t.bytes, "start": t.start_ns,
         "end": t.end_ns, "op": t.attrs["collective"], "world": t.attrs["world_size"],
         "wait": t.attrs.get("notify_wait_ns", 0)}
        for t in log.tasks if t.task_type is TaskType.HCCL
    ]
    with open(f"{out}/rank{rank}.json", "w") as f:
        json.dump(res, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2, int(sys.argv[1]), sys.argv[2]), nprocs=2)
"""


@pytest.fixture(scope="module")
def collectives(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    folder = tmp_path_factory.mktemp("collectives")
    script = _write(folder, "collectives.py", _COLLECTIVES)
    _run([sys.executable, str(script), str(_free_port()), str(folder)], _clean_env())
    return _results(folder)


def test_collectives_compute_the_right_values(collectives: list[dict[str, Any]]) -> None:
    for rank, res in enumerate(collectives):
        assert res["backend"] == "hccl"
        assert res["sum"] == [3.0] and res["avg"] == [1.5]
        assert res["max"] == [2.0] and res["min"] == [1.0] and res["int_sum"] == [11]
        assert res["all_gather"] == [[1.0], [2.0]]
        assert res["all_gather_single"] == [1.0] * 200 + [2.0] * 200
        expected = [2.0 * (128 * rank + i) + 1000.0 for i in range(128)]
        assert res["reduce_scatter_single"] == expected
        assert res["reduce_scatter"] == [20.0 * rank + 1.0]
        assert res["broadcast"] == [8.0]
        assert res["cpu_sum"] == [3.0, 3.0, 3.0]
        assert res["big_ok"]


def test_mp_spawn_ranks_report_their_device(collectives: list[dict[str, Any]]) -> None:
    assert [res["current_device"] for res in collectives] == [0, 1]


def test_each_collective_is_one_hccl_task_costed_by_the_model(
    collectives: list[dict[str, Any]],
) -> None:
    expected = [
        ("hcom_allreduce_", 4000),
        ("hcom_allreduce_", 4000),
        ("hcom_allreduce_", 4000),
        ("hcom_allreduce_", 4000),
        ("hcom_allreduce_", 8000),
        ("hcom_allgather_", 2400),  # the gathered output
        ("hcom_allgather_", 1600),
        ("hcom_reducescatter_", 1024),  # the input
        ("hcom_reducescatter_", 512),
        ("hcom_broadcast_", 200),
        ("hcom_barrier_", 0),  # the CPU all-reduce before it is gloo's alone
    ]
    for res in collectives:
        assert [tuple(x) for x in res["names"]] == expected
        for task in res["hccl"]:
            assert task["stream"] != res["default_stream"]
            assert task["world"] == 2
            cost = collective_cost(SPEC.hccl, task["op"], task["bytes"], 2)
            assert task["end"] - task["start"] - task["wait"] == cost.duration_ns > 0
    # every rank transfers the same collectives at the same times (a rank that is ready
    # earlier begins its task earlier and waits inside it)

    def transfers(res: dict[str, Any]) -> list[dict[str, Any]]:
        return [t | {"start": t["start"] + t["wait"], "wait": None} for t in res["hccl"]]

    assert transfers(collectives[0]) == transfers(collectives[1])


def test_a_barrier_aligns_the_hosts(collectives: list[dict[str, Any]]) -> None:
    assert collectives[0]["host_after_barrier"] == collectives[1]["host_after_barrier"]


def test_the_slowest_rank_sets_the_start(collectives: list[dict[str, Any]]) -> None:
    slow, after_matmul = collectives[0]["hccl"][-3], collectives[0]["hccl"][-2]
    transfer = slow["start"] + slow["wait"]
    assert transfer >= collectives[1]["host_before_slow"] > collectives[0]["host_before_slow"]
    # rank 0 was ready first: its task begins then and waits for rank 1 inside (notify wait)
    assert slow["wait"] > 0 and collectives[1]["hccl"][-3]["wait"] == 0
    # rank 0's matmul delays rank 1's collective too
    assert after_matmul["start"] >= collectives[0]["matmul_end"]


def test_wait_orders_the_stream_not_the_host(collectives: list[dict[str, Any]]) -> None:
    for res in collectives:
        big = res["hccl"][-1]
        assert big["bytes"] == 16 * 1024 * 1024
        assert res["host_after_big"] < big["end"]  # the host went on
        assert res["default_tail_after_big"] >= big["end"]  # the current stream waits
        assert res["host_after_sync"] >= big["end"]


# ---- DDP under torchrun ---------------------------------------------------------------------

_DDP_COMMON = """
import torch
import torch.nn as nn

STEPS = 3
LR = 1e-3


def make_model():
    torch.manual_seed(0)
    layers = []
    for _ in range(5):
        layers += [nn.Linear(256, 256), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(256, 4))


def batch(rank, step):
    # rank's batch (the same every step): inputs and a fixed teacher's outputs
    teacher = torch.randn(256, 4, generator=torch.Generator().manual_seed(7)) / 16
    x = torch.randn(16, 256, generator=torch.Generator().manual_seed(1000 + rank))
    return x, torch.tanh(x @ teacher)
"""

_DDP = (
    _DDP_COMMON
    + """
import copy, json, os, sys

import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import msprof_py.adapter
import msprof_py.adapter.distributed as hccl
from msprof_py.device import TaskKind, TaskLog, TaskType

out = sys.argv[1]
rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
npu = msprof_py.adapter.install()
hccl.register()
torch.npu.set_device(local)
dist.init_process_group(backend="hccl")
log = TaskLog()
npu.subscribe(log)
res = {"current_device": torch.npu.current_device()}


def train(device_ids, steps, tag):
    model = make_model().to("npu")
    ddp = DDP(model, device_ids=device_ids, bucket_cap_mb=0.3)
    opt = torch.optim.AdamW(ddp.parameters(), lr=LR, foreach=True)
    losses, waits, overlapped, buckets = [], [], 0, []
    for step in range(steps):
        x, y = batch(rank, step)
        loss = nn.functional.mse_loss(ddp(x.to("npu")), y.to("npu"))
        opt.zero_grad()
        first = len(log.tasks)
        loss.backward()
        middle = len(log.tasks)
        opt.step()
        comm = [t for t in log.tasks[first:middle] if t.task_type is TaskType.HCCL]
        buckets.append([t.bytes for t in comm if t.attrs["collective"] == "allreduce"])
        backward = [t for t in log.tasks[first:middle] if t.kind is TaskKind.KERNEL]
        after = [t for t in log.tasks[middle:] if t.kind is TaskKind.KERNEL]
        overlapped += sum(
            1 for c in comm for k in backward if k.start_ns < c.end_ns and c.start_ns < k.end_ns
        )
        # the optimizer starts after the last gradient all-reduce has finished
        waits.append(min(k.start_ns for k in after) >= max(c.end_ns for c in comm))
        losses.append(loss.item())
    torch.save([p.detach().cpu() for p in model.parameters()], f"{out}/{tag}{rank}.pt")
    return {"losses": losses, "optimizer_waits": waits, "overlapped": overlapped,
            "buckets": buckets}


res["ranked"] = train([local], STEPS, "ranked")
res["plain"] = train(None, 2, "plain")
res["hccl"] = [
    (t.attrs["collective"], t.bytes, t.duration_ns - t.attrs.get("notify_wait_ns", 0), t.stream_id)
    for t in log.tasks if t.task_type is TaskType.HCCL
]
res["default_stream"] = npu.engine.default_stream.stream_id
with open(f"{out}/rank{rank}.json", "w") as f:
    json.dump(res, f)
dist.destroy_process_group()
"""
)


def _reference(steps: int) -> list[torch.Tensor]:
    """Single-process training on CPU with the gradients of both ranks' batches averaged."""
    scope: dict[str, Any] = {}
    exec(_DDP_COMMON, scope)
    model = scope["make_model"]()
    opt = torch.optim.AdamW(model.parameters(), lr=scope["LR"], foreach=True)
    for step in range(steps):
        grads = []
        for rank in range(2):
            model.zero_grad()
            x, y = scope["batch"](rank, step)
            torch.nn.functional.mse_loss(model(x), y).backward()
            grads.append([p.grad.clone() for p in model.parameters()])
        for p, g0, g1 in zip(model.parameters(), *grads, strict=True):
            p.grad = g0 * 0.5 + g1 * 0.5  # DDP scales by 1/world before summing
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


STEPS_OF_DDP = 3


def _ddp_buckets(steps: int, bucket_cap_mb: float) -> list[list[int]]:
    """The gradient all-reduce sizes (bytes) real DDP issues per step for ``make_model``, from
    torch's own bucket assignment: the first iteration runs one bucket of every gradient
    (``find_unused_parameters=False``), then DDP rebuilds its buckets in the order the
    gradients became ready (last layer first), ``bucket_cap_mb`` each (the 1 MiB first bucket
    is the default cap's only), and all-reduces them in that order."""
    import torch.distributed as dist

    scope: dict[str, Any] = {}
    exec(_DDP_COMMON, scope)
    params = list(scope["make_model"]().parameters())
    whole = sum(p.numel() * p.element_size() for p in params)
    ready = list(reversed(params))  # a Sequential's gradients come back last layer first
    cap = int(bucket_cap_mb * 1024 * 1024)
    limits = [dist._DEFAULT_FIRST_BUCKET_BYTES, cap] if bucket_cap_mb == 25 else [cap]
    indices, _ = dist._compute_bucket_assignment_by_size(ready, limits, [False] * len(ready))
    rebuilt = [sum(ready[i].numel() * ready[i].element_size() for i in b) for b in indices]
    return [[whole]] + [rebuilt] * (steps - 1)


def test_ddp_under_torchrun_matches_a_single_process_reference(tmp_path: Path) -> None:
    script = _write(tmp_path, "ddp.py", _DDP)
    cmd = [*_torchrun(), "--standalone", "--nproc-per-node=2", str(script), str(tmp_path)]
    _run(cmd, _clean_env())
    results = _results(tmp_path)
    assert [r["current_device"] for r in results] == [0, 1]
    for tag, steps in (("ranked", 3), ("plain", 2)):
        ranks = [torch.load(tmp_path / f"{tag}{r}.pt") for r in range(2)]
        reference = _reference(steps)
        for p0, p1, ref in zip(ranks[0], ranks[1], reference, strict=True):
            assert torch.equal(p0, p1), tag  # bit-identical across ranks
            assert torch.equal(p0, ref), tag  # and equal to averaging the gradients
        for res in results:
            assert all(res[tag]["optimizer_waits"]), tag
    ranked = results[0]["ranked"]
    assert ranked["losses"][-1] < ranked["losses"][0]
    # after DDP rebuilt its buckets, gradient all-reduces run beside backward kernels
    assert ranked["overlapped"] > 0
    for res in results:
        assert res["ranked"]["buckets"] == _ddp_buckets(STEPS_OF_DDP, bucket_cap_mb=0.3)
        allreduces = [t for t in res["hccl"] if t[0] == "allreduce"]
        assert len(allreduces) >= 5  # one per bucket and step
        for op, nbytes, duration, stream in res["hccl"]:
            assert stream != res["default_stream"]
            assert duration == collective_cost(SPEC.hccl, op, nbytes, 2).duration_ns


_FSDP = """
import json, os, sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy

import msprof_py.adapter
import msprof_py.adapter.distributed as hccl

msprof_py.adapter.install()
hccl.register()
dist.init_process_group("hccl")
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).to("npu")
# FULL_SHARD frees each gathered parameter's storage (resize_(0)) and grows it back; the
# module already on the npu (each rank's tensors are npu:0 in its own process)
fsdp = FSDP(model, sharding_strategy=ShardingStrategy.FULL_SHARD)
opt = torch.optim.SGD(fsdp.parameters(), lr=0.1)
x, y = torch.randn(8, 32), torch.randn(8, 4)  # the same batch on every rank
losses = []
for _ in range(3):
    loss = ((fsdp(x.to("npu")) - y.to("npu")) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
with open(f"{sys.argv[1]}/rank{rank}.json", "w") as f:
    json.dump({"losses": losses}, f)
dist.destroy_process_group()
"""


@pytest.mark.skipif(not native.status().startswith("compiled"), reason=native.status())
def test_fsdp_full_shard_under_torchrun_trains_as_one_cpu_process(tmp_path: Path) -> None:
    """FSDP's FULL_SHARD resizes its parameters' npu storages (``untyped_storage().resize_``,
    which torch asks the device's hooks for): two ranks train as one CPU process would."""
    script = _write(tmp_path, "fsdp.py", _FSDP)
    _run(
        [*_torchrun(), "--standalone", "--nproc-per-node=2", str(script), str(tmp_path)],
        _clean_env(),
    )
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 32), torch.randn(8, 4)
    reference = []
    for _ in range(3):
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        reference.append(loss.item())
    for result in _results(tmp_path):
        assert result["losses"] == pytest.approx(reference, rel=1e-6)


# ---- a failing peer -------------------------------------------------------------------------

_CRASH = """
import json, os, sys, time
from datetime import timedelta

import torch
import torch.distributed as dist

import msprof_py.adapter
import msprof_py.adapter.distributed as hccl

out = sys.argv[1]
rank = int(os.environ["RANK"])
msprof_py.adapter.install()
hccl.register()
dist.init_process_group("hccl", timeout=timedelta(seconds=10))
t = torch.ones(1024, device="npu")
dist.all_reduce(t)
pg = dist.distributed_c10d._get_default_group()
if rank == 1:
    # join the next all-reduce's ready-time exchange, then die before sending the data
    pg._exchange(0, hccl._KINDS["allreduce"], 4096, timedelta(seconds=10))
    os._exit(3)
res = {"first": t.cpu().tolist()[:2]}
start = time.monotonic()
work = dist.all_reduce(t, async_op=True)
for name, wait in (("future", lambda: work.get_future().wait()), ("wait", work.wait),
                   ("next", lambda: dist.all_reduce(t))):
    try:
        wait()
        res[name] = "no error"
    except Exception as exc:
        res[name] = f"{type(exc).__name__}: {exc}"
    res[name + "_s"] = time.monotonic() - start
with open(f"{out}/rank0.json", "w") as f:
    json.dump(res, f)
os._exit(0)
"""


def _launch_ranks(script: Path, folder: Path, world: int = 2, timeout: float = 60) -> list[int]:
    """Start one process per rank with ``env://`` variables; their exit codes."""
    port = str(_free_port())
    procs = []
    for r in range(world):
        env = _clean_env(
            RANK=str(r),
            LOCAL_RANK=str(r),
            WORLD_SIZE=str(world),
            LOCAL_WORLD_SIZE=str(world),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
        )
        with open(folder / f"rank{r}.log", "w") as log:
            cmd = [sys.executable, str(script), str(folder)]
            procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT))
    deadline = time.monotonic() + timeout
    try:
        return [p.wait(timeout=max(1.0, deadline - time.monotonic())) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_a_peer_dying_mid_collective_raises_on_the_survivor(tmp_path: Path) -> None:
    codes = _launch_ranks(_write(tmp_path, "crash.py", _CRASH), tmp_path)
    assert codes == [0, 3], (tmp_path / "rank0.log").read_text()[-4000:]
    res = json.loads((tmp_path / "rank0.json").read_text())
    assert res["first"] == [2.0, 2.0]
    for name in ("future", "wait", "next"):
        assert res[name] != "no error", res
        assert res[name + "_s"] < 15.0, res  # within the group's 10 s timeout (and a margin)


_HANG = """
import json, os, sys, time
from datetime import timedelta

import torch
import torch.distributed as dist

import msprof_py.adapter
import msprof_py.adapter.distributed as hccl

out = sys.argv[1]
rank = int(os.environ["RANK"])
msprof_py.adapter.install()
hccl.register()
dist.init_process_group("hccl", timeout=timedelta(seconds=60))
group = dist.new_group([0, 1], timeout=timedelta(seconds=2))
t = torch.ones(8, device="npu")
dist.all_reduce(t, group=group)
if rank == 1:  # alive, but never joins the next collective
    deadline = time.monotonic() + 30
    while not os.path.exists(f"{out}/rank0.json") and time.monotonic() < deadline:
        time.sleep(0.05)
    os._exit(0)
start = time.monotonic()
try:
    dist.all_reduce(t, group=group)
    res = {"error": None}
except Exception as exc:
    res = {"error": f"{type(exc).__name__}: {exc}"}
res["seconds"] = time.monotonic() - start
with open(f"{out}/rank0.json.tmp", "w") as f:
    json.dump(res, f)
os.rename(f"{out}/rank0.json.tmp", f"{out}/rank0.json")
os._exit(0)
"""


def test_a_silent_peer_raises_after_the_group_timeout(tmp_path: Path) -> None:
    codes = _launch_ranks(_write(tmp_path, "hang.py", _HANG), tmp_path)
    assert codes == [0, 0], (tmp_path / "rank0.log").read_text()[-4000:]
    res = json.loads((tmp_path / "rank0.json").read_text())
    assert res["error"] is not None and "timed out" in res["error"].lower(), res
    assert 1.5 < res["seconds"] < 10.0, res


# ---- shapes only ----------------------------------------------------------------------------


def test_numerics_none_costs_collectives_without_values(tmp_path: Path) -> None:
    code = """
    import torch, torch.distributed as dist
    import msprof_py.adapter, msprof_py.adapter.distributed as hccl
    from msprof_py.device import TaskLog, TaskType
    npu = msprof_py.adapter.install(numerics="none")
    hccl.register()
    log = TaskLog(); npu.subscribe(log)
    dist.init_process_group("hccl", store=dist.HashStore(), rank=0, world_size=1)
    t = torch.empty(256, device="npu")
    dist.all_reduce(t)
    outs = [torch.empty(8, device="npu")]
    dist.all_gather(outs, torch.empty(8, device="npu"))
    dist.barrier()
    print([(x.name, x.bytes) for x in log.tasks if x.task_type is TaskType.HCCL])
    dist.destroy_process_group()
    """
    out = _run([sys.executable, "-c", textwrap.dedent(code)], _clean_env())
    expected = "[('hcom_allreduce_', 1024), ('hcom_allgather_', 32), ('hcom_barrier_', 0)]"
    assert out.strip().splitlines()[-1] == expected


# ---- the sample ------------------------------------------------------------------------------


def _check_sample_output(stdout: str) -> None:
    # the ranks print to one pipe: their lines may interleave
    losses = [float(x) for x in re.findall(r"step \d+: loss (\d+\.\d+)", stdout)]
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses)
    sums = re.findall(r"parameter checksum (-?\d+\.\d+(?:e[-+]?\d+)?)", stdout)
    assert len(sums) == 2 and sums[0] == sums[1]
    assert "(npu:0)" in stdout and "(npu:1)" in stdout
    assert "parameters identical on all ranks: True" in stdout


@pytest.mark.slow  # the default run records this sample under torchrun (test_msprof_run.py)
def test_sample_runs_under_torchrun() -> None:
    sample = str(ROOT / "sample_runs" / "train_ddp.py")
    cmd = [*_torchrun(), "--standalone", "--nproc-per-node=2", sample, "--steps", "3"]
    _check_sample_output(_run(cmd, _clean_env()))


@pytest.mark.slow
def test_sample_spawns_its_ranks_without_a_launcher() -> None:
    sample = str(ROOT / "sample_runs" / "train_ddp.py")
    _check_sample_output(_run([sys.executable, sample, "--steps", "3"], _clean_env()))


def test_register_needs_the_adapter() -> None:
    code = """
    import msprof_py.adapter.distributed as hccl
    try:
        hccl.register()
    except RuntimeError as exc:
        print("refused:", exc)
    """
    out = _run([sys.executable, "-c", textwrap.dedent(code)], _clean_env())
    assert "refused:" in out and "install()" in out
