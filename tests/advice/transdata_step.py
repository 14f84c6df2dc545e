"""A small convolutional training step whose activations go between NC1HWC0 and ND in every
block (the sample of the transdata_heavy check, issue 13).

Each block is a 1x1 convolution followed by a softmax over the channels (an attention-like
gate): the convolution produces NC1HWC0, the softmax needs ND, the next convolution
NC1HWC0 again, so each block converts its activation twice forward and twice backward. The
convolutions are cheap (16 channels), so TransData is a large part of the step and the
convolutions a small one: ``torch.npu.config.allow_internal_format = False`` is the advice.

    python tests/advice/transdata_step.py [--steps 4] [--blocks 4]
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn as nn
from sample_loop import train

CHANNELS = 16


class GatedConv(nn.Module):
    """A 1x1 convolution whose output is gated by its own softmax over the channels."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(CHANNELS, CHANNELS, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return torch.softmax(y, dim=1) * y


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--size", type=int, default=128, help="image side")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model = nn.Sequential(*[GatedConv() for _ in range(args.blocks)]).to("npu")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(args.batch_size, CHANNELS, args.size, args.size).to("npu")
    last = train(args.steps, optimizer, lambda _: model(x).square().mean())
    print(f"{args.steps} steps, {args.blocks} blocks, last loss {last.item():.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
