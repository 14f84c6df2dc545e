"""Small models and a training loop for the graph-mode tests."""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn


def cnn() -> nn.Module:
    """conv / batch norm / relu, then a linear head."""
    return nn.Sequential(
        nn.Conv2d(3, 4, 3),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(4 * 6 * 6, 5),
    )


def mlp() -> nn.Module:
    """Two linear layers with GELU and layer norm."""
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 3))


def train(
    model: nn.Module,
    inputs: list[torch.Tensor],
    device: str,
    wrap: Callable[[nn.Module], Callable] = lambda m: m,
) -> tuple[list[torch.Tensor], nn.Module]:
    """SGD with momentum over ``inputs`` on ``device``; the losses (on CPU) and the model."""
    model = copy.deepcopy(model).to(device)
    step = wrap(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for x in inputs:
        opt.zero_grad()
        loss = step(x.to(device)).square().mean()
        loss.backward()
        opt.step()
        losses.append(loss.detach().cpu())
    return losses, model
