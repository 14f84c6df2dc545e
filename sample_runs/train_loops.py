"""Training loops whose steps are not what they seem: the step analysis has to cope with them.

* ``--loop nosync``: no ``.item()``, no synchronize: the host runs ahead of the device (as in
  timm's training benchmark), so host step marks say nothing about when each step's device
  work ran;
* ``--loop eval``: an evaluation pass inside the training loop every ``--eval-every`` steps:
  one step holds far more work than the others (an outlier step);
* ``--loop gan``: a generator and a discriminator, each with its own optimizer: two
  ``optimizer.step()`` calls per iteration.

    python sample_runs/train_loops.py --loop nosync [--steps 6] [--batch-size 64]
"""

from __future__ import annotations

import argparse
import itertools

import torch
import torch.nn as nn
import torch.nn.functional as F

if not hasattr(torch, "npu"):  # a launcher may have installed the device already
    import msprof_py.adapter

    msprof_py.adapter.install()


def mlp(sizes: list[int]) -> nn.Sequential:
    """Linear layers with ReLU between them."""
    layers: list[nn.Module] = []
    for a, b in itertools.pairwise(sizes):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def nosync(args: argparse.Namespace, device: str) -> None:
    """A loop that never waits for the device (large matmuls: the device is the bottleneck)."""
    model = mlp([1024, 4096, 4096, 10]).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, foreach=True)
    x = torch.randn(args.batch_size * 4, 1024, device=device)
    y = torch.randint(0, 10, (args.batch_size * 4,), device=device)
    for _ in range(args.steps):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.npu.synchronize()
    print(f"nosync: {args.steps} steps done")


def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batches: int) -> float:
    """Accuracy over ``batches`` forward passes."""
    model.eval()
    correct = 0
    with torch.no_grad():
        for _ in range(batches):
            correct += int((model(x).argmax(1) == y).sum().item())
    model.train()
    return correct / (batches * len(y))


def with_eval(args: argparse.Namespace, device: str) -> None:
    """Evaluation inside the training loop: one step much longer than the others."""
    model = mlp([256, 512, 512, 10]).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, foreach=True)
    x = torch.randn(args.batch_size, 256, device=device)
    y = torch.randint(0, 10, (args.batch_size,), device=device)
    for step in range(args.steps):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if (step + 1) % args.eval_every == 0:
            acc = evaluate(model, x, y, args.eval_batches)
            print(f"step {step + 1}: eval accuracy {acc:.3f}")
        opt.step()
        print(f"step {step + 1}/{args.steps}  loss {loss.item():.4f}")


def gan(args: argparse.Namespace, device: str) -> None:
    """A GAN: the discriminator's and the generator's optimizer both step every iteration."""
    gen = mlp([64, 256, 256]).to(device)
    disc = mlp([256, 256, 1]).to(device)
    opt_d = torch.optim.Adam(disc.parameters(), lr=2e-4, foreach=True)
    opt_g = torch.optim.Adam(gen.parameters(), lr=2e-4, foreach=True)
    real = torch.randn(args.batch_size, 256, device=device)
    ones = torch.ones(args.batch_size, 1, device=device)
    zeros = torch.zeros(args.batch_size, 1, device=device)
    for it in range(args.steps):
        fake = gen(torch.randn(args.batch_size, 64, device=device))
        d_loss = F.binary_cross_entropy_with_logits(
            disc(real), ones
        ) + F.binary_cross_entropy_with_logits(disc(fake.detach()), zeros)
        opt_d.zero_grad(set_to_none=True)
        d_loss.backward()
        opt_d.step()
        g_loss = F.binary_cross_entropy_with_logits(disc(fake), ones)
        opt_g.zero_grad(set_to_none=True)
        g_loss.backward()
        opt_g.step()
        print(f"iteration {it + 1}/{args.steps}  d {d_loss.item():.4f}  g {g_loss.item():.4f}")


LOOPS = {"nosync": nosync, "eval": with_eval, "gan": gan}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loop", choices=sorted(LOOPS), default="nosync")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--eval-every", type=int, default=4, help="eval: steps between evals")
    parser.add_argument("--eval-batches", type=int, default=40, help="eval: forward passes")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    LOOPS[args.loop](args, "npu")


if __name__ == "__main__":
    main()
