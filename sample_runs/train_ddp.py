"""Data-parallel training on 2 (simulated) Ascend NPUs with DistributedDataParallel over HCCL.

Written the way Ascend training scripts are written: ``torch.npu.set_device(local_rank)``,
``dist.init_process_group(backend="hccl")``, ``model.to("npu")``, DDP, a DistributedSampler
giving each rank its own share of the data. Each rank runs in its own process with its own
simulated device; gradients are all-reduced over the ``hccl`` backend (values through gloo,
time as HCCL tasks on each device's timeline, overlapping the backward pass).

    torchrun --nproc-per-node=2 sample_runs/train_ddp.py [--steps 10] [--slow-rank 1]
    python sample_runs/train_ddp.py [--steps 10] [--nproc 2]     # spawns the ranks itself

``--slow-rank R`` makes rank R a straggler: every step it runs extra device work (as an
uneven data shard or a costly augmentation would), and the other ranks wait for it in the
gradient all-reduces; ``msprof analyze`` names it (rule ``slow_rank``) with cause ``compute``.

Rank 0 prints the loss of every step (averaged over the ranks) and the simulated step time;
every rank prints a checksum of its parameters, which DDP keeps identical on all ranks.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

if not hasattr(torch, "npu"):  # a launcher may have installed the device already
    import msprof_py.adapter

    msprof_py.adapter.install()


class Net(nn.Module):
    """A small MLP regressor: enough layers for DDP to fill several gradient buckets."""

    def __init__(self, features: int = 64, hidden: int = 256, layers: int = 4) -> None:
        super().__init__()
        blocks: list[nn.Module] = [nn.Linear(features, hidden), nn.ReLU()]
        for _ in range(layers - 1):
            blocks += [nn.Linear(hidden, hidden), nn.ReLU()]
        blocks.append(nn.Linear(hidden, 1))
        self.body = nn.Sequential(*blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def synthetic_dataset(samples: int = 512, features: int = 64) -> TensorDataset:
    """Inputs and targets of a fixed random teacher (the same on every rank)."""
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(samples, features, generator=g)
    teacher = torch.randn(features, 1, generator=g) / features**0.5
    y = torch.tanh(x @ teacher) + 0.05 * torch.randn(samples, 1, generator=g)
    return TensorDataset(x, y)


def checksum(model: nn.Module) -> float:
    """Sum of all parameters in float64 (identical on every rank after DDP steps)."""
    return sum(float(p.detach().double().sum().item()) for p in model.parameters())


def straggle(device: torch.device, size: int = 1024, matmuls: int = 6) -> None:
    """Extra device work of a straggler rank: ``matmuls`` products of ``size``-square matrices
    (the result is not used; training numerics are unchanged)."""
    a = torch.ones(size, size, device=device)
    for _ in range(matmuls):
        a = a @ a * (1.0 / size)


def train(
    steps: int = 10, batch_size: int = 32, lr: float = 3e-3, slow_rank: int | None = None
) -> float:
    """Train on this rank; returns the parameter checksum. The launcher's env gives the rank;
    ``slow_rank`` does extra device work every step."""
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.npu.set_device(local_rank)
    dist.init_process_group(backend="hccl")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    device = torch.device("npu")

    torch.manual_seed(0)  # the same initial weights everywhere (DDP broadcasts rank 0's anyway)
    model = Net().to(device)
    ddp_model = DDP(model, device_ids=[local_rank], bucket_cap_mb=0.25)
    optimizer = torch.optim.AdamW(ddp_model.parameters(), lr=lr)
    loss_fn = nn.MSELoss()

    dataset = synthetic_dataset()
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=True)

    if rank == 0:
        print(
            f"world size {world_size}, backend {dist.get_backend()}, "
            f"{torch.npu.get_device_name()}, {len(loader)} steps per epoch",
            flush=True,
        )
    step, epoch = 0, 0
    start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
    while step < steps:
        sampler.set_epoch(epoch)
        for x, y in loader:
            if step >= steps:
                break
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            start.record()
            optimizer.zero_grad(set_to_none=True)
            if rank == slow_rank:
                straggle(device)
            loss = loss_fn(ddp_model(x), y)
            loss.backward()
            optimizer.step()
            end.record()
            reported = loss.detach().clone()
            dist.all_reduce(reported, op=dist.ReduceOp.AVG)
            end.synchronize()
            if rank == 0:
                print(
                    f"step {step}: loss {reported.item():.6f}  "
                    f"(simulated step time {start.elapsed_time(end):.3f} ms)",
                    flush=True,
                )
            step += 1
        epoch += 1

    torch.npu.synchronize()
    total = checksum(model)
    print(
        f"rank {rank} (npu:{torch.npu.current_device()}): parameter checksum {total!r}",
        flush=True,
    )
    sums: list[float | None] = [None] * world_size
    dist.all_gather_object(sums, total)
    if rank == 0:
        print(f"parameters identical on all ranks: {len(set(sums)) == 1}", flush=True)
    dist.destroy_process_group()
    return total


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawned(
    index: int, nproc: int, port: int, steps: int, batch_size: int, lr: float, slow: int | None
) -> None:
    """One rank started by ``mp.spawn``: set what torchrun would have set, then train."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(index),
        LOCAL_RANK=str(index),
        WORLD_SIZE=str(nproc),
        LOCAL_WORLD_SIZE=str(nproc),
    )
    train(steps, batch_size, lr, slow)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--nproc", type=int, default=2, help="ranks to spawn without torchrun")
    parser.add_argument(
        "--slow-rank", type=int, default=None, help="make this rank a straggler (extra work)"
    )
    args = parser.parse_args(argv)
    if "LOCAL_RANK" in os.environ:  # started by torchrun: this process is one rank
        train(args.steps, args.batch_size, args.lr, args.slow_rank)
    else:
        mp.spawn(
            _spawned,
            args=(
                args.nproc,
                _free_port(),
                args.steps,
                args.batch_size,
                args.lr,
                args.slow_rank,
            ),
            nprocs=args.nproc,
        )


if __name__ == "__main__":
    main(sys.argv[1:])
