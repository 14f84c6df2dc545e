"""The graph samples' models train compiled exactly as on the CPU: three SGD-momentum steps of
the ResNet of ``resnet50_graph.py`` (every block kind, small) and of the two-tower model of
``two_tower_graph.py`` (multi-stream plans) give bitwise eager CPU losses, parameters and
buffers (steps 2-3 replay the stored plans)."""

from __future__ import annotations

import copy

import pytest
import resnet50_graph
import torch
import two_tower_graph
from torch import nn

from msprof_py.device import SimulatedNpu


def _train(model: nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]], device: str):
    model = copy.deepcopy(model).to(device)
    step = torch.compile(model, backend="npu") if device == "npu" else model
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for x, y in batches:
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(step(x.to(device)), y.to(device))
        loss.backward()
        opt.step()
        losses.append(loss.detach().cpu())
    return losses, model.state_dict()


def _resnet() -> tuple[nn.Module, list[tuple[torch.Tensor, torch.Tensor]]]:
    model = resnet50_graph.ResNet(blocks=(1, 1), width=4, num_classes=3)
    return model, [(torch.randn(2, 3, 16, 16), torch.tensor([0, 2])) for _ in range(3)]


def _towers() -> tuple[nn.Module, list[tuple[torch.Tensor, torch.Tensor]]]:
    w = two_tower_graph.Workload.quick()
    model = two_tower_graph.TwoTower(w.features, w.wide, w.deep, w.depth, w.classes)
    return model, [
        (torch.randn(w.batch, w.features), torch.arange(w.batch) % w.classes) for _ in range(3)
    ]


@pytest.mark.slow  # two Dynamo compiles (forward and backward): 4-9 s each
@pytest.mark.parametrize("make", [_resnet, _towers], ids=["resnet", "two_tower"])
def test_three_compiled_steps_of_the_sample_models_equal_eager_cpu(npu: SimulatedNpu, make):
    torch.manual_seed(0)
    model, batches = make()
    cpu_losses, cpu_state = _train(model, batches, "cpu")
    npu_losses, npu_state = _train(model, batches, "npu")
    assert len(npu_losses) == 3
    for a, b in zip(cpu_losses, npu_losses, strict=True):
        assert torch.equal(a, b)
    assert cpu_losses[0] != cpu_losses[2]  # the steps did train
    for name, value in npu_state.items():
        assert value.device.type == "npu"
        assert torch.equal(value.cpu(), cpu_state[name]), name
