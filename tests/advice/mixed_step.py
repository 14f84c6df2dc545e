"""A training step with both of the recommendation check's replayable causes (issue 13): the
gated convolutions of ``transdata_step.py`` (TransData between NC1HWC0 and ND in every block)
and the int64 index arithmetic of ``index_step.py`` (AI CPU fallbacks), summed into one loss.
The sample of the joint check: both recipes applied together
(``allow_internal_format = False`` and ``--index-dtype int32``) against the joint estimate.

    python tests/advice/mixed_step.py [--steps 4] [--index-dtype int64|int32]
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from index_step import VOCAB
from sample_loop import train
from transdata_step import CHANNELS, GatedConv


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--blocks", type=int, default=2)
    parser.add_argument("--size", type=int, default=64, help="image side")
    parser.add_argument("--indices", type=int, default=16384)
    parser.add_argument("--index-dtype", choices=("int64", "int32"), default="int64")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    convs = nn.Sequential(*[GatedConv() for _ in range(args.blocks)]).to("npu")
    table = nn.Embedding(VOCAB, CHANNELS).to("npu")
    params = [*convs.parameters(), *table.parameters()]
    optimizer = torch.optim.SGD(params, lr=0.01)
    x = torch.randn(8, CHANNELS, args.size, args.size).to("npu")
    base = torch.arange(args.indices, dtype=getattr(torch, args.index_dtype)).to("npu")
    target = torch.zeros(args.indices, CHANNELS).to("npu")

    def loss_of(step: int) -> torch.Tensor:
        ids = (base * 7 + step) % VOCAB
        return convs(x).square().mean() + F.mse_loss(table(ids), target)

    last = train(args.steps, optimizer, loss_of)
    print(f"{args.steps} steps, index dtype {args.index_dtype}, last loss {last.item():.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
