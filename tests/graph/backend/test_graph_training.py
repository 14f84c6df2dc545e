"""Compiled training on the npu backend equals eager CPU bitwise (losses, parameters, buffers)."""

from __future__ import annotations

import pytest
import torch
from graph_models import cnn, mlp, train

from msprof_py.device import SimulatedNpu


@pytest.mark.parametrize(
    ("make", "shape"), [(cnn, (2, 3, 8, 8)), (mlp, (4, 8))], ids=["cnn", "mlp"]
)
def test_three_compiled_steps_equal_eager_cpu(npu: SimulatedNpu, make, shape) -> None:
    torch.manual_seed(0)
    model = make()
    inputs = [torch.randn(shape) for _ in range(3)]
    cpu_losses, cpu_model = train(model, inputs, "cpu")
    npu_losses, npu_model = train(model, inputs, "npu", lambda m: torch.compile(m, backend="npu"))
    for a, b in zip(cpu_losses, npu_losses, strict=True):
        assert torch.equal(a, b)
    cpu_state = cpu_model.state_dict()
    for name, value in npu_model.state_dict().items():
        assert value.device.type == "npu"
        assert torch.equal(value.cpu(), cpu_state[name]), name
