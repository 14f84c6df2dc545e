"""The single-stream switch (GE's SINGLE_STREAM_ENABLE): every spelling, and its effect."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from msprof_py.device import SimulatedNpu
from msprof_py.graph import backend
from msprof_py.graph.config import REDUCE_OVERHEAD, GraphConfig
from msprof_py.graph.runner import compiled_graphs


def test_default_is_multi_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(backend.SINGLE_STREAM_ENV, raising=False)
    assert backend.resolve_config().single_stream is False


@pytest.mark.parametrize(
    "kwargs",
    [
        {"options": {"single_stream": True}},
        {"options": {"single_stream": "1"}},
        {"config": GraphConfig(single_stream=True)},
        {
            "config": SimpleNamespace(
                mode=None, ge_config=SimpleNamespace(enable_single_stream=True)
            )
        },
    ],
    ids=["options", "options-str", "GraphConfig", "torchair-ge_config"],
)
def test_spellings_choose_one_stream(monkeypatch: pytest.MonkeyPatch, kwargs: dict) -> None:
    monkeypatch.delenv(backend.SINGLE_STREAM_ENV, raising=False)
    assert backend.resolve_config(**kwargs).single_stream is True


@pytest.mark.parametrize(("value", "expected"), [("1", True), ("true", True), ("0", False)])
def test_environment_switch(monkeypatch: pytest.MonkeyPatch, value: str, expected: bool) -> None:
    monkeypatch.setenv(backend.SINGLE_STREAM_ENV, value)
    cfg = backend.resolve_config(options={"mode": REDUCE_OVERHEAD})
    assert cfg.single_stream is expected and cfg.mode == REDUCE_OVERHEAD


def test_torchair_config_reaches_the_backend() -> None:
    import torchair

    config = torchair.CompilerConfig()
    config.ge_config.enable_single_stream = True
    assert backend.resolve_config(config).single_stream is True


class _Branches(nn.Module):
    """Two independent branches joined at the end."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.a(x)) + torch.tanh(self.b(x))


@pytest.mark.parametrize("single", [False, True])
def test_single_stream_plans_one_stream(npu: SimulatedNpu, single: bool) -> None:
    earlier = {id(g) for g in compiled_graphs()}  # graphs of earlier tests may still be alive
    model = _Branches().to("npu")
    with torch.no_grad():
        torch.compile(model, backend="npu", options={"single_stream": single})(
            torch.randn(4, 8).to("npu")
        )
    (graph,) = [g for g in compiled_graphs() if id(g) not in earlier]
    plan = graph.last_plan
    assert plan is not None
    if single:
        assert plan.streams == 1 and plan.events == 0
        assert {k.stream for k in plan.kernels} == {0}
    else:
        assert plan.streams == 2 and plan.events >= 1  # one stream per branch, one join
