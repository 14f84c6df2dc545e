"""torch.compile on npu modules runs (the default backend becomes graph mode, "npu"), and the
compiled graphs' kernels reach the device (one graph launch per call)."""

from __future__ import annotations

import torch
from torch import nn

from msprof_py.device import SimulatedNpu, TaskLog


def test_default_backend_runs_and_ops_reach_the_device(npu: SimulatedNpu, log: TaskLog) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten())
    reference = [p.detach().clone() for p in model.parameters()]
    model = model.to("npu")
    compiled = torch.compile(model)
    x = torch.randn(2, 3, 8, 8)
    for _ in range(2):
        start, host_start = len(log.tasks), len(log.host)
        out = compiled(x.to("npu"))
        out.sum().backward()
        names = {t.op_type for t in log.tasks[start:]}
        # graph mode fuses the training BatchNorm with its ReLU (one kernel, GE's name)
        assert {"Conv2D", "Conv2DBackpropFilter", "BNTrainingUpdateReluV2"} <= names
        assert "Relu" not in names
        launches = [h.name for h in log.host[host_start:] if h.name.startswith("ModelExecute")]
        assert len(launches) == 2  # the forward and the backward graph
    eager = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten())
    with torch.no_grad():
        for p, value in zip(eager.parameters(), reference, strict=True):
            p.copy_(value)
    eager(x)
    assert out.device.type == "npu"
    assert torch.allclose(out.detach().cpu(), eager(x).detach(), atol=1e-6)
