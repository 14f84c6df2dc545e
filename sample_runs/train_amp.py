"""Mixed-precision training on the (simulated) Ascend NPU: autocast + GradScaler.

The usual AMP loop of an Ascend training script: the forward pass under
``torch.npu.amp.autocast()`` (matmuls in bf16 or fp16, softmax, norms and the loss in fp32), the
loss scaled by ``torch.npu.amp.GradScaler`` before backward, the scaler unscaling, checking for
inf and updating its scale. Prints per-step loss, the scale, and the simulated step time; run
with ``--no-amp`` to compare with fp32 on the cube's fp32 rate.

bf16 is the default because the simulated device computes values on the CPU, where bf16
matmuls are fast and fp16 ones very slow; ``--dtype fp16`` works, slowly (or with
``--numerics none`` under msprof).

    python sample_runs/train_amp.py [--steps 5] [--dtype bf16|fp16] [--no-amp]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

if not hasattr(torch, "npu"):  # a launcher may have installed the device already
    import msprof_py.adapter

    msprof_py.adapter.install()


class MLPClassifier(nn.Module):
    """A wide MLP: enough matmul work for fp16 and fp32 to differ on the cube."""

    def __init__(self, features: int = 1024, hidden: int = 2048, classes: int = 100) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(features, hidden),
            nn.GELU(),
            nn.LayerNorm(hidden),
            nn.Linear(hidden, hidden),
            nn.GELU(),
            nn.Linear(hidden, classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


@dataclass
class AmpResult:
    """Losses, loss scales and simulated step times (ms) of one run."""

    losses: list[float]
    scales: list[float]
    step_ms: list[float]


def train(
    steps: int = 5,
    batch_size: int = 2048,
    amp: bool = True,
    seed: int = 0,
    dtype: torch.dtype = torch.bfloat16,
) -> AmpResult:
    """Train for ``steps`` steps on npu in mixed ``dtype``; ``amp=False`` trains in fp32."""
    device = "npu"
    torch.manual_seed(seed)
    model = MLPClassifier().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.npu.amp.GradScaler(enabled=amp)
    data = torch.Generator().manual_seed(seed + 1)
    teacher = torch.randn(1024, 100, generator=data)  # labels a model can learn
    result = AmpResult([], [], [])
    for _ in range(steps):
        features = torch.randn(batch_size, 1024, generator=data)
        x, y = features.to(device), (features @ teacher).argmax(1).to(device)
        start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
        start.record()
        optimizer.zero_grad(set_to_none=True)
        with torch.npu.amp.autocast(enabled=amp, dtype=dtype):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        end.record()
        torch.npu.synchronize()
        result.losses.append(loss.item())
        result.scales.append(scaler.get_scale() if amp else 1.0)
        result.step_ms.append(start.elapsed_time(end))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=2048)
    parser.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    parser.add_argument("--no-amp", dest="amp", action="store_false", help="train in fp32")
    args = parser.parse_args(argv)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    result = train(args.steps, args.batch_size, amp=args.amp, dtype=dtype)
    for i, (loss, scale, ms) in enumerate(
        zip(result.losses, result.scales, result.step_ms, strict=True)
    ):
        print(f"step {i}: loss {loss:.4f}  scale {scale:g}  step {ms:.3f} ms (simulated)")
    steady = result.step_ms[1:] or result.step_ms
    label = f"AMP {args.dtype}" if args.amp else "fp32"
    print(f"{label} mean step: {sum(steady) / len(steady):.3f} ms (simulated)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
