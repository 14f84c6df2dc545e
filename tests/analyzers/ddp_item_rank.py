"""Two DDP ranks on the simulated NPU; only rank 1 reads the loss (``loss.item()``) every step.

Used by tests/analyzers/test_analyze_straggler.py (recorded under ``msprof``):

    python ddp_item_rank.py [STEPS]
"""

from __future__ import annotations

import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

if not hasattr(torch, "npu"):
    import msprof_py.adapter

    msprof_py.adapter.install()


def train(steps: int) -> None:
    """Train ``steps`` steps on this rank (the launcher's env gives the rank)."""
    local = int(os.environ["LOCAL_RANK"])
    torch.npu.set_device(local)
    dist.init_process_group(backend="hccl")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(
        nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256)).to("npu"),
        device_ids=[local],
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 256, device="npu")
    y = torch.randn(64, 256, device="npu")
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        if rank == 1:
            loss.item()
    torch.npu.synchronize()
    dist.destroy_process_group()


def spawned(i: int, port: int, steps: int) -> None:
    """One rank started by ``mp.spawn``, with the env torchrun would set."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(i),
        LOCAL_RANK=str(i),
        WORLD_SIZE="2",
        LOCAL_WORLD_SIZE="2",
    )
    train(steps)


if __name__ == "__main__":
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    if "LOCAL_RANK" in os.environ:
        train(steps)
    else:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.spawn(spawned, args=(port, steps), nprocs=2)
