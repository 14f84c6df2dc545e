"""Train a small ResNet on synthetic images on the (simulated) Ascend NPU.

Written the way training scripts for Ascend devices are written (``device = "npu"``,
``model.to(device)``, ``torch.npu.synchronize()``): a stem convolution, BasicBlocks of
Conv+BN+ReLU with residual adds, global average pooling and a linear classifier, trained with
SGD with momentum and cross-entropy on a fixed synthetic batch. Each step is timed with
``torch.npu.Event`` pairs, so the step time printed is simulated device time.

    python sample_runs/train_resnet.py [--steps 5] [--batch-size 8]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

if not hasattr(torch, "npu"):  # a launcher may have installed the device already
    import msprof_py.adapter

    msprof_py.adapter.install()


class BasicBlock(nn.Module):
    """Two 3x3 Conv+BN layers with a residual add (a strided 1x1 projection when shapes change)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    """A ResNet-style CNN for 32x32 images: stem, three stages of BasicBlocks, pool, linear."""

    def __init__(self, num_classes: int = 10, width: int = 16) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True)
        )
        self.layer1 = BasicBlock(width, width)
        self.layer2 = BasicBlock(width, 2 * width, stride=2)
        self.layer3 = BasicBlock(2 * width, 4 * width, stride=2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(4 * width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layer3(self.layer2(self.layer1(self.stem(x))))
        return self.fc(torch.flatten(self.pool(x), 1))


def synthetic_batch(
    batch_size: int, num_classes: int = 10, image_size: int = 32, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed batch of random images and labels (on the CPU)."""
    g = torch.Generator().manual_seed(seed)
    images = torch.randn(batch_size, 3, image_size, image_size, generator=g)
    labels = torch.randint(0, num_classes, (batch_size,), generator=g)
    return images, labels


@dataclass
class TrainResult:
    """Per-step losses and step times of one run."""

    device: str
    losses: list[float] = field(default_factory=list)
    #: simulated ms per step on npu (torch.npu.Event), real ms on other devices
    step_ms: list[float] = field(default_factory=list)

    @property
    def mean_step_ms(self) -> float:
        """Mean step time, leaving the first step (warm-up) out when there are several."""
        times = self.step_ms[1:] if len(self.step_ms) > 1 else self.step_ms
        return sum(times) / len(times) if times else 0.0


def build(seed: int = 0, num_classes: int = 10) -> ResNet:
    """The model with deterministic initial weights (on the CPU)."""
    torch.manual_seed(seed)
    return ResNet(num_classes)


def train(
    steps: int = 5,
    batch_size: int = 8,
    device: str = "npu",
    *,
    lr: float = 0.05,
    seed: int = 0,
    verbose: bool = True,
) -> TrainResult:
    """Train for ``steps`` steps on ``device`` and return the losses and step times."""
    device_type = torch.device(device).type
    on_npu = device_type == "npu"
    model = build(seed).to(device)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=1e-4)
    criterion = nn.CrossEntropyLoss()
    images, labels = synthetic_batch(batch_size, seed=seed)
    images, labels = images.to(device), labels.to(device)

    result = TrainResult(device=device_type)
    if on_npu:
        torch.npu.synchronize()
    for step in range(steps):
        if on_npu:
            start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
            start.record()
        else:
            t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = criterion(model(images), labels)
        loss.backward()
        optimizer.step()
        if on_npu:
            end.record()
            torch.npu.synchronize()
            elapsed = start.elapsed_time(end)
        else:
            elapsed = (time.perf_counter() - t0) * 1e3
        result.losses.append(loss.item())
        result.step_ms.append(elapsed)
        if verbose:
            print(f"step {step + 1}/{steps}  loss {result.losses[-1]:.4f}  {elapsed:.3f} ms")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--device", default="npu", help="npu (default) or cpu")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(f"ResNet on {args.device}: batch {args.batch_size}x3x32x32, {args.steps} steps")
    result = train(args.steps, args.batch_size, args.device, seed=args.seed)
    kind = "simulated" if result.device == "npu" else "measured"
    print(f"mean step time ({kind}): {result.mean_step_ms:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
