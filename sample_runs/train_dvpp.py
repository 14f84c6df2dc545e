"""Image classification from a folder of JPEGs: CPU preprocessing against DVPP (torchvision_npu).

The script writes ``--images`` JPEGs with PIL into a temporary folder, then trains a small CNN
on them through ``DataLoader(num_workers=..., pin_memory=True)`` with three input pipelines:

- ``cpu``: the workers decode with PIL and run RandomResizedCrop (+ ColorJitter with
  ``--jitter``) + ToTensor + Normalize on the host; the main loop copies the batch to the npu;
- ``dvpp``: the workers only read the files' bytes; the main loop decodes the batch on the npu
  (``torchvision_npu.decode_jpeg(list, device='npu')``: one JPEGD task), crops and resizes the
  list of images in one batch VPC task (ColorJitter another), and normalises with npu ops,
  then runs the step: the DVPP work sits in front of the step's kernels;
- ``dvpp+prefetch``: the same, but the next batch is decoded and transformed right after the
  current step's work is queued and before ``loss.item()`` blocks: the DVPP stream decodes
  and resizes while the AI Cores run the step (the media engines are separate hardware).

It prints the input pipeline's images/s and the step time of each, with the assumptions: CPU
preprocessing time is *measured* on this host (per image, in the workers) and scaled by the
worker count (workers assumed to run in parallel, overlapped with the device); DVPP and the
step are *simulated* on the device preset's rates. No speedup figure is assumed: the ratio is
what the model computes for these images.

    python sample_runs/train_dvpp.py [--images 64] [--size 500x375] [--batch 16] [--workers 2]
                                     [--jitter]
    python sample_runs/train_dvpp.py --quick
"""

from __future__ import annotations

import argparse
import io
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from PIL import Image
from torch.utils.data import DataLoader, Dataset

import msprof_py.adapter
from msprof_py.device import TaskKind, TaskLog

if not hasattr(torch, "npu"):  # a launcher may have installed the device already
    msprof_py.adapter.install()

# resolves to msprof-py's shim once the npu device is installed
import torchvision_npu
from torchvision_npu import transforms as T

#: the input pipelines compared (see the module)
MODES = ("cpu", "dvpp", "dvpp+prefetch")
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
CLASSES = 4


def write_jpegs(folder: Path, count: int, width: int, height: int) -> list[Path]:
    """``count`` JPEGs of smooth random colour fields (class ``i % CLASSES`` tints a channel)."""
    rng = np.random.default_rng(0)
    paths = []
    for i in range(count):
        base = rng.integers(0, 200, (height // 8 + 1, width // 8 + 1, 3), dtype=np.uint8)
        base[..., i % 3] = np.minimum(base[..., i % 3] + 40 * (i % CLASSES), 255)
        img = Image.fromarray(base).resize((width, height), Image.BILINEAR)
        path = folder / f"img_{i:04d}.jpg"
        img.save(path, format="JPEG", quality=90)
        paths.append(path)
    return paths


class JpegFolder(Dataset):
    """Items: ``(image, label, host seconds)``; ``mode='cpu'`` preprocesses with PIL,
    ``'dvpp'`` returns the file's bytes as a uint8 tensor."""

    def __init__(self, paths: list[Path], mode: str, crop: int, jitter: bool = False) -> None:
        self.paths, self.mode = paths, mode
        self.transform = T.Compose(transforms(crop, jitter))

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int, float]:
        start = time.perf_counter()
        data = self.paths[i].read_bytes()
        if self.mode == "cpu":
            with Image.open(io.BytesIO(data)) as img:
                out = self.transform(img.convert("RGB"))
        else:
            out = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        return out, i % CLASSES, time.perf_counter() - start


def transforms(crop: int, jitter: bool) -> list:
    """RandomResizedCrop, optionally ColorJitter, ToTensor, Normalize."""
    picture = [T.RandomResizedCrop(crop)]
    if jitter:
        picture.append(T.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1))
    return [*picture, T.ToTensor(), T.Normalize(MEAN, STD)]


def collate(items: list) -> tuple[list[torch.Tensor], torch.Tensor, float]:
    """Images as a list (JPEG byte strings differ in length), labels, summed host seconds."""
    return [x[0] for x in items], torch.tensor([x[1] for x in items]), sum(x[2] for x in items)


class SmallNet(nn.Module):
    """Three strided convs, global pooling, a linear classifier."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, width, 3, 2, 1)
        self.c2 = nn.Conv2d(width, 2 * width, 3, 2, 1)
        self.c3 = nn.Conv2d(2 * width, 2 * width, 3, 2, 1)
        self.fc = nn.Linear(2 * width, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.c3(F.relu(self.c2(F.relu(self.c1(x))))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


@dataclass
class RunResult:
    """One pipeline's figures (ns are simulated device time, seconds measured host time)."""

    mode: str
    images: int = 0
    losses: list[float] = field(default_factory=list)
    step_ns: list[int] = field(default_factory=list)
    host_prep_s: float = 0.0
    dvpp_busy_ns: int = 0
    dvpp_tasks: int = 0
    #: DVPP task time during which a kernel ran (the decode/resize the step hid)
    dvpp_overlap_ns: int = 0
    #: images decoded and transformed (prefetching prepares one batch more than it trains)
    prepared: int = 0

    @property
    def mean_step_ms(self) -> float:
        """Mean step time in ms: simulated device step; for cpu, the step cannot be shorter
        than its batch's preprocessing (filled in by :func:`run`)."""
        return sum(self.step_ns) / len(self.step_ns) / 1e6 if self.step_ns else 0.0


def run(
    mode: str,
    paths: list[Path],
    *,
    batch: int,
    workers: int,
    crop: int,
    steps: int,
    jitter: bool = False,
) -> RunResult:
    """Train ``steps`` steps with the ``cpu``, ``dvpp`` or ``dvpp+prefetch`` input pipeline."""
    torch.manual_seed(0)
    npu = msprof_py.adapter.current_device()
    dvpp = mode != "cpu"
    loader = DataLoader(
        JpegFolder(paths, "dvpp" if dvpp else "cpu", crop, jitter),
        batch_size=batch,
        num_workers=workers,
        pin_memory=True,
        collate_fn=collate,
        drop_last=True,
    )
    model = SmallNet().to("npu")
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    tf = T.Compose(transforms(crop, jitter))
    result = RunResult(mode)
    log = TaskLog()
    batches = iter(loader)

    def prepare() -> tuple[torch.Tensor, torch.Tensor, int, float]:
        """The next batch on the npu: (images, labels, count, host seconds in the workers)."""
        images, labels, host_s = next(batches)
        result.prepared += len(images)
        if dvpp:  # one JPEGD task, one batch VPC task per picture transform
            x = torch.stack(tf(torchvision_npu.decode_jpeg(images, device="npu")))
        else:
            x = torch.stack(images).to("npu", non_blocking=True)
        return x, labels.to("npu", non_blocking=True), len(images), host_s

    # one batch is left for the prefetching loop to prepare ahead of its last step, so every
    # pipeline's step window holds one batch's preparation and one step
    steps = min(steps, len(loader) - 1)
    npu.subscribe(log)
    try:
        torch.npu.synchronize()
        ahead = prepare() if mode == "dvpp+prefetch" else None
        for _ in range(steps):
            start = npu.engine.host_ns
            x, y, count, host_s = ahead if ahead is not None else prepare()
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if ahead is not None:
                ahead = prepare()  # queued behind the step: DVPP runs beside its kernels
            result.losses.append(float(loss.item()))
            torch.npu.synchronize()
            result.step_ns.append(npu.engine.host_ns - start)
            result.images += count
            result.host_prep_s += host_s
    finally:
        npu.unsubscribe(log)
    dvpp_tasks = [t for t in log.tasks if t.kind is TaskKind.DVPP]
    result.dvpp_tasks = len(dvpp_tasks)
    result.dvpp_busy_ns = sum(t.duration_ns for t in dvpp_tasks)
    kernels = [(t.start_ns, t.end_ns) for t in log.tasks if t.kind is TaskKind.KERNEL]
    result.dvpp_overlap_ns = sum(_overlap(t.start_ns, t.end_ns, kernels) for t in dvpp_tasks)
    return result


def _overlap(start: int, end: int, spans: list[tuple[int, int]]) -> int:
    """How much of [start, end) some span covers (the spans of one stream do not overlap)."""
    return sum(max(0, min(end, e) - max(start, s)) for s, e in spans)


def pipeline_images_per_s(r: RunResult, workers: int) -> float:
    """Input-pipeline throughput: cpu from the measured host time per image x the workers;
    dvpp from the simulated DVPP task time per image."""
    if not r.images:
        return 0.0
    if r.mode == "cpu":
        per_image = r.host_prep_s / r.images
        return max(1, workers) / per_image if per_image else 0.0
    return r.prepared / (r.dvpp_busy_ns / 1e9) if r.dvpp_busy_ns else 0.0


def effective_step_ms(r: RunResult, workers: int, batch: int) -> float:
    """Step time the loop sees: dvpp's simulated step (decode is on the device timeline);
    cpu: with workers the batch is prepared in parallel with the device (the longer of the
    two), with ``num_workers=0`` in the loop (their sum)."""
    if r.mode != "cpu":
        return r.mean_step_ms
    rate = pipeline_images_per_s(r, workers)
    prep_ms = batch / rate * 1e3 if rate else 0.0
    return max(r.mean_step_ms, prep_ms) if workers else r.mean_step_ms + prep_ms


def main(argv: list[str] | None = None) -> list[RunResult]:
    """Run the three pipelines and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--size", default="500x375", help="JPEG width x height")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2, choices=(0, 1, 2, 4))
    parser.add_argument("--crop", type=int, default=224)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument(
        "--jitter", action="store_true", help="add ColorJitter (on VPC in the dvpp pipelines)"
    )
    parser.add_argument("--quick", action="store_true", help="tiny run for tests")
    args = parser.parse_args(argv)
    if args.quick:
        args.images, args.size, args.batch, args.crop, args.steps = 12, "256x192", 4, 32, 2
        args.workers = 0
    width, height = (int(v) for v in args.size.split("x"))
    npu = msprof_py.adapter.current_device()
    with tempfile.TemporaryDirectory(prefix="msprof_dvpp_") as tmp:
        paths = write_jpegs(Path(tmp), args.images, width, height)
        opts = {"batch": args.batch, "workers": args.workers, "crop": args.crop}
        results = [run(mode, paths, steps=args.steps, jitter=args.jitter, **opts) for mode in MODES]
    jitter = " + ColorJitter" if args.jitter else ""
    print(f"device {npu.spec.name}: {args.images} JPEGs {width}x{height}, batch {args.batch}, ")
    print(f"num_workers={args.workers}, pin_memory=True, RandomResizedCrop({args.crop}){jitter}")
    print(
        f"{'pipeline':<15}{'input img/s':>12}{'step ms':>10}{'DVPP tasks':>11}"
        f"{'DVPP ms':>9}{'hidden':>8}{'loss':>9}"
    )
    for r in results:
        rate = pipeline_images_per_s(r, args.workers)
        step = effective_step_ms(r, args.workers, args.batch)
        loss = r.losses[-1] if r.losses else float("nan")
        n = max(1, r.prepared // args.batch)  # batches prepared
        hidden = f"{r.dvpp_overlap_ns / r.dvpp_busy_ns:.0%}" if r.dvpp_busy_ns else "-"
        print(
            f"{r.mode:<15}{rate:>12.0f}{step:>10.3f}{r.dvpp_tasks / n:>11.0f}"
            f"{r.dvpp_busy_ns / n / 1e6:>9.3f}{hidden:>8}{loss:>9.4f}"
        )
    print(
        "assumptions: cpu img/s is measured host time on this machine x num_workers (workers "
        "in parallel);\n  dvpp img/s and every step time are simulated from the preset's "
        "JPEGD/VPC rates and cost model;\n  the ratio is what this model computes for these "
        "images, not a measured or quoted speedup.\n  DVPP tasks and ms are per batch; hidden: "
        "the share of DVPP time a kernel ran beside (DVPP has its own stream);\n  ColorJitter "
        "runs on VPC by assumption (torchvision_npu accelerates it, the engine is not "
        "documented)."
    )
    return results


if __name__ == "__main__":
    main()
