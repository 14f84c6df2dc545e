"""With numerics "cpu", training on npu gives bitwise the values training on CPU gives."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from msprof_py.device import SimulatedNpu


def _cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1, groups=2),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Dropout(0.1),
        nn.Linear(16, 10),
    )


def _train(model: nn.Module, optimizer_cls: type, options: dict, device: str) -> list[float]:
    torch.manual_seed(1)
    model = copy.deepcopy(model).to(device)
    optimizer = optimizer_cls(model.parameters(), **options)
    data = torch.Generator().manual_seed(2)
    losses = []
    for _ in range(3):
        x = torch.randn(4, 3, 16, 16, generator=data).to(device)
        y = torch.randint(0, 10, (4,), generator=data).to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return [*losses, *(p.detach().cpu() for p in model.state_dict().values())]


@pytest.mark.parametrize(
    ("optimizer_cls", "options"),
    [
        (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}),
        (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "foreach": True}),
        (torch.optim.SGD, {"lr": 0.1, "fused": True}),
        (torch.optim.Adam, {"lr": 1e-3, "foreach": False}),
        (torch.optim.AdamW, {"lr": 1e-3, "foreach": False}),
        (torch.optim.AdamW, {"lr": 1e-3, "foreach": True}),
        (torch.optim.AdamW, {"lr": 1e-3, "fused": True}),
    ],
)
def test_training_is_bitwise_equal_to_cpu(
    npu: SimulatedNpu, optimizer_cls: type, options: dict
) -> None:
    torch.manual_seed(0)
    model = _cnn()
    on_cpu = _train(model, optimizer_cls, options, "cpu")
    on_npu = _train(model, optimizer_cls, options, "npu")
    for expected, got in zip(on_cpu, on_npu, strict=True):
        if isinstance(expected, torch.Tensor):
            assert torch.equal(expected, got)
        else:
            assert expected == got


def test_autograd_grad_and_higher_level_ops(npu: SimulatedNpu) -> None:
    torch.manual_seed(0)
    x_cpu = torch.randn(3, 5, requires_grad=True)
    x_npu = x_cpu.detach().to("npu").requires_grad_()
    results = []
    for x in (x_cpu, x_npu):
        y = torch.softmax(x @ x.t(), dim=-1).logsumexp(dim=0).sum()
        (grad,) = torch.autograd.grad(y, x)
        results.append((y.detach().cpu(), grad.cpu()))
    assert torch.equal(results[0][0], results[1][0])
    assert torch.equal(results[0][1], results[1][1])
