"""Every API a finding names exists in torch 2.13 or the torch_npu shim, accepts the
arguments the finding suggests, and does on the npu device what the finding promises."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
import torch

import msprof_py.analyzers
from msprof_py.analyzers.findings import rule_specs
from msprof_py.device import SimulatedNpu, TaskKind, TaskLog

FUSED = rule_specs()["fused_optimizer"].extra["fused"]


def _params() -> list[torch.nn.Parameter]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2)).to("npu")
    model(torch.randn(4, 8, device="npu")).sum().backward()
    return list(model.parameters())


def _step_kernels(opt: torch.optim.Optimizer, log: TaskLog) -> int:
    """Kernels of a steady step (the first one also creates the optimizer state)."""
    opt.step()
    before = len(log.tasks)
    opt.step()
    return sum(1 for t in log.tasks[before:] if t.kind is TaskKind.KERNEL)


@pytest.mark.parametrize("cls", sorted(FUSED))
def test_fused_optimizer_advice_names_working_apis(
    npu: SimulatedNpu, log: TaskLog, cls: str
) -> None:
    import torch_npu.optim

    fix = FUSED[cls]
    params = _params()
    per_param = _step_kernels(getattr(torch.optim, cls)(params, lr=0.01, foreach=False), log)
    fused = _step_kernels(getattr(torch.optim, cls)(params, lr=0.01, **fix["kwargs"]), log)
    npu_cls = getattr(torch_npu.optim, fix["npu"])
    assert issubclass(npu_cls, getattr(torch.optim, cls))
    shim = _step_kernels(npu_cls(params, lr=0.01), log)
    assert per_param >= len(params)  # per tensor: at least one kernel each
    # the promise the rule's gain model makes: one kernel, plus the kernels the fused step
    # keeps (Adam's step counters: one in-place _foreach_add_, a multi-tensor kernel on the
    # 910B for up to 48 counters)
    assert fused == 1 + (1 if fix.get("step_counters") else 0)
    assert shim == 1
    assert fused < per_param


_API = re.compile(r"\b(?:torch_npu|torchvision_npu|torch|msprof_py)(?:\.[A-Za-z_][A-Za-z0-9_]*)+")


def _named_apis() -> set[str]:
    """Every dotted torch / torch_npu / torchvision_npu / msprof_py name the analysis's
    advice, messages and rule files spell out."""
    root = Path(msprof_py.analyzers.__file__).parent
    files = [*root.glob("*.py"), *root.glob("rules/*.yaml")]
    return {m for f in files for m in _API.findall(f.read_text())}


def _resolve(name: str) -> object:
    parts = name.split(".")
    obj = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], start=1):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            obj = importlib.import_module(".".join(parts[: i + 1]))
    return obj


def test_every_api_the_advice_names_exists(npu: SimulatedNpu) -> None:
    """A name the analysis tells users to call resolves in torch 2.13 or in the shims (with
    the npu installed, as under msprof); the scan finds the names it should."""
    names = _named_apis()
    assert {"torch_npu.npu_fusion_attention", "torch.compile"} <= names
    missing = []
    for name in sorted(names):
        try:
            _resolve(name)
        except (AttributeError, ImportError):
            missing.append(name)
    assert not missing, missing
