"""A small training step with integer index arithmetic on the device (the sample of the
aicpu_fallback check, issue 13).

Each step computes the rows to look up on the device, ``(base * 7 + step) % vocab``, in the
index dtype, then trains an embedding bag and a linear layer on them with plain SGD. In int64
(the default, as ``torch.arange`` makes them) the three integer ops fall back to the AI CPU;
``--index-dtype int32`` keeps them on the AI Core's vector unit.

    python tests/advice/index_step.py [--steps 4] [--index-dtype int64|int32]
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from sample_loop import train

VOCAB = 4096


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32768)
    parser.add_argument("--index-dtype", choices=("int64", "int32"), default="int64")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    table = nn.Embedding(VOCAB, 16).to("npu")
    head = nn.Linear(16, 1).to("npu")
    optimizer = torch.optim.SGD([*table.parameters(), *head.parameters()], lr=0.1)
    base = torch.arange(args.batch_size, dtype=getattr(torch, args.index_dtype)).to("npu")
    target = torch.zeros(args.batch_size, 1).to("npu")

    def loss_of(step: int) -> torch.Tensor:
        ids = (base * 7 + step) % VOCAB
        return F.mse_loss(head(table(ids)), target)

    last = train(args.steps, optimizer, loss_of)
    print(f"{args.steps} steps, index dtype {args.index_dtype}, last loss {last.item():.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
