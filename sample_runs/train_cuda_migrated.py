"""A training script written for CUDA, run on the (simulated) Ascend NPU through transfer_to_npu.

Everything below the two torch_npu imports is ordinary CUDA code: ``torch.cuda.is_available()``,
``device="cuda"``, ``.cuda()``, ``torch.cuda.amp.autocast`` and ``GradScaler``,
``torch.cuda.synchronize()`` and CUDA events. Importing ``torch_npu.contrib.transfer_to_npu``
makes all of it run on npu unchanged, which is how CUDA scripts are migrated to Ascend.

    python sample_runs/train_cuda_migrated.py [--steps 5]
"""

from __future__ import annotations

import argparse
import sys

import torch

if not hasattr(torch, "npu"):  # a launcher may have installed the device already
    import msprof_py.adapter

    msprof_py.adapter.install()

# ---- unchanged CUDA code from here on --------------------------------------------------------
import torch.nn as nn
import torch.nn.functional as F
import torch_npu  # noqa: F401  (the two lines a migration adds)
from torch_npu.contrib import transfer_to_npu  # noqa: F401


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(64)
        self.fc = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.relu(self.bn2(self.conv2(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def train(steps: int = 5, batch_size: int = 32) -> list[float]:
    """Train with AMP on ``cuda`` (npu after transfer_to_npu); return the losses."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True
    model = Net().cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = torch.cuda.amp.GradScaler()
    images = torch.randn(batch_size, 3, 32, 32, device=device)
    labels = torch.randint(0, 10, (batch_size,), device="cuda")
    losses = []
    for step in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        optimizer.zero_grad()
        with torch.cuda.amp.autocast(dtype=torch.bfloat16):
            loss = F.cross_entropy(model(images), labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        end.record()
        torch.cuda.synchronize()
        losses.append(loss.item())
        print(
            f"step {step}: loss {loss.item():.4f}  {start.elapsed_time(end):.3f} ms  "
            f"on {images.device}, {torch.cuda.memory_allocated() / 2**20:.1f} MiB allocated"
        )
    return losses


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args(argv)
    train(args.steps, args.batch_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
