"""Modes and spellings: reduce-overhead refuses what aclgraph cannot capture (one line each),
TorchAir's API builds the same backend, compiling ``torch.compile``'s ``mode`` through."""

from __future__ import annotations

import pytest
import torch
from graph_models import mlp
from torch import nn

from msprof_py.device import HostKind, SimulatedNpu, TaskLog
from msprof_py.device.spec import DeviceSpec
from msprof_py.graph.backend import GraphModeError
from msprof_py.graph.runner import compiled_graphs

REDUCE = {"mode": "reduce-overhead"}


def _graph_launches(log: TaskLog) -> list[str]:
    return [h.name for h in log.host if h.kind is HostKind.LAUNCH and h.name.startswith("Model")]


def _one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_reduce_overhead_runs_static_graphs_unfused(npu: SimulatedNpu, log: TaskLog) -> None:
    before = set(compiled_graphs())
    torch.manual_seed(0)
    model = torch.compile(mlp().to("npu"), backend="npu", options=REDUCE)
    x = torch.randn(4, 8)
    with torch.no_grad():
        out = model(x.to("npu"))
    assert _graph_launches(log) == ["ModelExecute graph0_inference"]
    (graph,) = set(compiled_graphs()) - before
    assert graph.config.mode == "reduce-overhead" and not graph.config.fuse
    assert out.shape == (4, 3)


def test_reduce_overhead_refuses_dynamic_shapes(npu: SimulatedNpu) -> None:
    model = torch.compile(mlp().to("npu"), backend="npu", options=REDUCE, dynamic=True)
    with pytest.raises(GraphModeError) as exc:
        model(torch.randn(4, 8).to("npu"))
    assert "dynamic shapes" in _one_line(exc)


def test_reduce_overhead_refuses_dropout(npu: SimulatedNpu) -> None:
    model = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5)).to("npu")
    compiled = torch.compile(model, backend="npu", options=REDUCE)
    with pytest.raises(GraphModeError) as exc:
        compiled(torch.randn(4, 8).to("npu"))
    assert "random-number ops" in _one_line(exc)


def test_max_autotune_runs_dropout(npu: SimulatedNpu, log: TaskLog) -> None:
    model = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5)).to("npu")
    torch.compile(model, backend="npu")(torch.randn(4, 8).to("npu")).sum().backward()
    assert len(_graph_launches(log)) == 2


def test_reduce_overhead_refuses_coupled_chips(npu: SimulatedNpu, monkeypatch) -> None:
    monkeypatch.setattr(npu, "spec", DeviceSpec.load("ascend910a"))
    compiled = torch.compile(mlp().to("npu"), backend="npu", options=REDUCE)
    with pytest.raises(GraphModeError) as exc:
        compiled(torch.randn(4, 8).to("npu"))
    assert "capture is not supported on ascend910a" in _one_line(exc)


def test_torch_compile_mode_selects_the_graph_mode(npu: SimulatedNpu) -> None:
    before = set(compiled_graphs())
    compiled = torch.compile(mlp().to("npu"), mode="reduce-overhead")  # default backend
    with torch.no_grad():
        compiled(torch.randn(4, 8).to("npu"))
    (graph,) = set(compiled_graphs()) - before
    assert graph.config.mode == "reduce-overhead"


def test_torchair_backend(npu: SimulatedNpu, log: TaskLog) -> None:
    import torchair

    config = torchair.CompilerConfig()
    assert config.mode == "max-autotune"
    config.experimental_config.frozen_parameter = True  # sections are plain namespaces
    backend = torchair.get_npu_backend(compiler_config=config)
    torch.manual_seed(0)
    model = mlp()
    x = torch.randn(4, 8)
    expected = model(x)
    out = torch.compile(model.to("npu"), backend=backend)(x.to("npu"))
    assert torch.equal(out.detach().cpu(), expected.detach())
    assert _graph_launches(log) == ["ModelExecute graph0_forward"]
    assert torchair.get_compiler(config) is not None


def test_backend_is_registered_by_name(npu: SimulatedNpu) -> None:
    assert "npu" in torch._dynamo.list_backends()


def test_a_compiled_model_has_no_graph_break() -> None:
    """torch calls the npu device guard back from C while Dynamo traces (the current stream):
    Dynamo tried to compile that callback and counted a graph break for every frame."""
    from torch._dynamo.utils import counters

    counters.clear()
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).to("npu")
    compiled = torch.compile(model, backend="npu")
    for _ in range(2):
        compiled(torch.randn(4, 8).to("npu")).sum().backward()
    assert dict(counters["graph_break"]) == {} and dict(counters["unimplemented"]) == {}
    assert dict(counters["frames"]) == {"total": 1, "ok": 1}
    assert counters["stats"]["unique_graphs"] == 1
