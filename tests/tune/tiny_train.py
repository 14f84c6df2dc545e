"""A tiny training script for the tuner tests: ``python tiny_train.py --batch-size N``.

Linear(64 -> 64) + ReLU + Linear(64 -> 64) over N x 4096 rows of 64 float32 values: each
sample's input and activations are 1 MiB tensors (the parameters are 33 KiB), so the peak of
a step grows by a known amount per sample (see tests/tune/test_analyze_tune.py).
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

#: rows per sample: one sample's tensor of 64 float32 values per row is 1 MiB
ROWS = 4096


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64)).to("npu")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.zeros(args.batch_size, ROWS, 64)
    for _ in range(args.steps):
        out = model(x.to("npu"))
        out.mean().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.npu.synchronize()


if __name__ == "__main__":
    main()
