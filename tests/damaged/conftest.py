"""Damaged-input tests: one small profile recorded per session (in-process), copied per case."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


def record_small(out: Path, steps: int = 3, width: int = 8) -> Path:
    """Record a tiny training loop in-process; return its run folder (``*_ascend_pt``)."""
    import torch

    import msprof_py

    with msprof_py.record(out) as rec:
        torch.manual_seed(0)
        x = torch.randn(4, width, device="npu")
        model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU()).to("npu")
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(steps):
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()
    assert rec.run_dir is not None
    return Path(rec.run_dir)


@pytest.fixture(scope="session")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two recorded profiles (``a``, and ``b`` of the same shape, for diff and gate baselines)
    and a budget that ``a`` passes."""
    from msprof_py.gates.budget import init_budget
    from msprof_py.gates.gate import rank_figures

    root = tmp_path_factory.mktemp("pristine")
    a = record_small(root / "a")
    b = record_small(root / "b")
    figs, _ = rank_figures(a)
    budget = root / "budget.toml"
    budget.write_text(init_budget(figs.values(), 0.5), encoding="utf-8")
    return {"a": a, "b": b, "budget": budget}


@pytest.fixture
def copy_of(tmp_path: Path, pristine: dict[str, Path]):
    """A fresh copy of a pristine profile (``copy_of("a")``), to damage."""

    def make(name: str = "a") -> Path:
        dest = tmp_path / name / pristine[name].name
        shutil.copytree(pristine[name], dest)
        return dest

    return make
