"""Feed a CNN from a DataLoader with pinned memory and a side-stream prefetcher on the NPU.

The data-loading pattern of CUDA/Ascend training scripts: a ``Dataset`` of synthetic images, a
``DataLoader(pin_memory=True)``, and a ``DataPrefetcher`` that copies the next batch to the
device with ``non_blocking=True`` on its own ``torch.npu.Stream`` while the current batch
trains; the compute stream waits for the copy stream only when it takes the batch
(``current_stream().wait_stream(copy_stream)``). With ``--no-prefetch`` the loop copies each
batch on the default stream, in order with the compute, the way a plain training loop does.

The script reports, in simulated time, how much of the host-to-device batch copy time ran
while kernels computed: with the prefetcher every copy but the first (issued before any
compute) runs under the previous step's kernels; without it, none does.

    python sample_runs/train_dataloader.py [--steps 5] [--batch-size 256] [--no-prefetch]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

import msprof_py.adapter
from msprof_py.device import TaskKind, TaskLog
from msprof_py.device.tasklog import overlap_length, union_length

if not hasattr(torch, "npu"):  # a launcher may have installed the device already
    msprof_py.adapter.install()


class SyntheticImages(Dataset):
    """``length`` random images with labels; item ``i`` is the same on every epoch and run."""

    def __init__(
        self, length: int, image_size: int = 64, num_classes: int = 10, seed: int = 0
    ) -> None:
        self.length = length
        self.image_size = image_size
        self.num_classes = num_classes
        self.seed = seed

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        label = index % self.num_classes
        image = torch.rand(3, self.image_size, self.image_size, generator=g)
        image[label % 3] += 0.5  # a little signal for the classifier to find
        return image, torch.tensor(label)


class DataPrefetcher:
    """Copies batch ``i + 1`` to the device on a side stream while batch ``i`` trains."""

    def __init__(self, loader: DataLoader, device: torch.device | str) -> None:
        self.loader = iter(loader)
        self.device = device
        self.stream = torch.npu.Stream()
        self.next_input: torch.Tensor | None = None
        self.next_target: torch.Tensor | None = None
        self.preload()

    def preload(self) -> None:
        try:
            self.next_input, self.next_target = next(self.loader)
        except StopIteration:
            self.next_input = self.next_target = None
            return
        with torch.npu.stream(self.stream):
            self.next_input = self.next_input.to(self.device, non_blocking=True)
            self.next_target = self.next_target.to(self.device, non_blocking=True)

    def next(self) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        torch.npu.current_stream().wait_stream(self.stream)
        images, labels = self.next_input, self.next_target
        if images is not None and labels is not None:
            # the tensors were allocated on the copy stream but are used on this one
            images.record_stream(torch.npu.current_stream())
            labels.record_stream(torch.npu.current_stream())
        self.preload()
        return images, labels


class ConvNet(nn.Module):
    """Four Conv+BN+ReLU layers (two strided), global pooling, linear classifier."""

    def __init__(self, num_classes: int = 10, width: int = 16) -> None:
        super().__init__()

        def conv(cin: int, cout: int, stride: int) -> nn.Sequential:
            return nn.Sequential(
                nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
                nn.BatchNorm2d(cout),
                nn.ReLU(inplace=True),
            )

        self.features = nn.Sequential(
            conv(3, width, 2),
            conv(width, width, 1),
            conv(width, 2 * width, 2),
            conv(2 * width, 2 * width, 1),
        )
        self.fc = nn.Linear(2 * width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


@dataclass
class LoaderResult:
    """Losses, step times and the copy/compute overlap of one run (simulated time)."""

    prefetch: bool
    losses: list[float] = field(default_factory=list)
    step_ms: list[float] = field(default_factory=list)
    #: host-to-device batch copies and kernels in the training window, in simulated ns
    copy_busy_ns: int = 0
    compute_busy_ns: int = 0
    overlapped_ns: int = 0
    elapsed_ns: int = 0

    @property
    def overlap(self) -> float:
        """Share of the batch copy time that ran while kernels computed."""
        return self.overlapped_ns / self.copy_busy_ns if self.copy_busy_ns else 0.0

    @property
    def mean_step_ms(self) -> float:
        """Mean simulated step time."""
        return sum(self.step_ms) / len(self.step_ms) if self.step_ms else 0.0


def train(
    steps: int = 5,
    batch_size: int = 256,
    *,
    prefetch: bool = True,
    image_size: int = 64,
    seed: int = 0,
    verbose: bool = True,
) -> LoaderResult:
    """Train ``steps`` steps on npu, feeding batches with or without the prefetcher."""
    device = torch.device("npu")
    torch.manual_seed(seed)
    model = ConvNet().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    dataset = SyntheticImages(steps * batch_size, image_size, seed=seed)
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, pin_memory=True)

    log = TaskLog()
    npu = msprof_py.adapter.current_device()
    torch.npu.synchronize()
    npu.subscribe(log)
    result = LoaderResult(prefetch=prefetch)
    try:
        batches = DataPrefetcher(loader, device) if prefetch else None
        plain = iter(loader)
        for step in range(steps):
            start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
            start.record()
            if batches is not None:
                images, labels = batches.next()
                assert images is not None and labels is not None
            else:
                images, labels = next(plain)
                images = images.to(device, non_blocking=True)
                labels = labels.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            loss = criterion(model(images), labels)
            loss.backward()
            optimizer.step()
            end.record()
            result.losses.append(loss.item())
            end.synchronize()
            result.step_ms.append(start.elapsed_time(end))
            if verbose:
                print(
                    f"step {step + 1}/{steps}  loss {result.losses[-1]:.4f}  "
                    f"{result.step_ms[-1]:.3f} ms"
                )
        torch.npu.synchronize()
    finally:
        npu.unsubscribe(log)

    batch_bytes = batch_size * 3 * image_size * image_size * 4
    copies = [t for t in log.copies() if t.op_type == "MEMCPY_H2D" and t.bytes >= batch_bytes]
    kernels = [t for t in log.tasks if t.kind is TaskKind.KERNEL]
    copy_iv, kernel_iv = TaskLog.intervals(copies), TaskLog.intervals(kernels)
    result.copy_busy_ns = union_length(copy_iv)
    result.compute_busy_ns = union_length(kernel_iv)
    result.overlapped_ns = overlap_length(copy_iv, kernel_iv)
    result.elapsed_ns = log.span_ns()
    return result


def _report(result: LoaderResult) -> str:
    mode = "prefetch on a side stream" if result.prefetch else "copy on the default stream"
    return (
        f"{mode}: batch copies {result.copy_busy_ns / 1e6:.3f} ms, kernels "
        f"{result.compute_busy_ns / 1e6:.3f} ms, copy time overlapped with compute "
        f"{result.overlapped_ns / 1e6:.3f} ms ({result.overlap:.1%})\n"
        f"mean step time (simulated): {result.mean_step_ms:.3f} ms"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument(
        "--no-prefetch",
        dest="prefetch",
        action="store_false",
        help="copy each batch on the default stream instead of prefetching on a side stream",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(
        f"ConvNet on npu: batches of {args.batch_size}x3x{args.image_size}x{args.image_size} "
        f"from a pinned DataLoader, {args.steps} steps, prefetch {'on' if args.prefetch else 'off'}"
    )
    result = train(
        args.steps,
        args.batch_size,
        prefetch=args.prefetch,
        image_size=args.image_size,
        seed=args.seed,
    )
    print(_report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
