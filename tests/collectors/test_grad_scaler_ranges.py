"""GradScaler calls run in ``GradScaler.<method>`` ranges once the session patches them (the
analysis tells the scaler's own ops from the user's by them); a disabled scaler adds none."""

from __future__ import annotations

import torch

from msprof_py.collectors.session import GRAD_SCALER_METHODS, _patch_grad_scaler


def _ranges(enabled: bool) -> set[str]:
    _patch_grad_scaler()
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", enabled=enabled)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        loss = model(torch.randn(3, 4)).sum()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        scaler.get_scale()
    return {e.name for e in prof.events() if e.name.startswith("GradScaler.")}


def test_an_enabled_scaler_runs_in_named_ranges() -> None:
    assert _ranges(True) == {f"GradScaler.{m}" for m in GRAD_SCALER_METHODS}


def test_a_disabled_scaler_adds_no_range() -> None:
    assert _ranges(False) == set()
