"""Fixtures of the importer tests: a small recorded run, and its torch_npu folder alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from import_helpers import without_raw

# the exporters' hand-made profiles (export_helpers), for runs of this folder alone
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "exporters"))

#: a small training run on the simulated npu with host<->device copies, AI CPU ops and
#: .item() read-backs; the session exports its *_ascend_pt folder when it stops
RECORD = """
import sys, torch
from msprof_py.collectors.session import SessionConfig, start_session
session = start_session(SessionConfig(output=sys.argv[1]))
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.Flatten(),
    torch.nn.Linear(8 * 6 * 6, 4),
).to("npu")
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
x = torch.randn(4, 3, 8, 8).to("npu")
y = torch.randint(0, 4, (4,)).to("npu")
for _ in range(3):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    kept = torch.nonzero(torch.arange(64, device="npu") * 3 - 40)
    loss.item()
print(session.stop())
"""


@pytest.fixture(scope="session")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A recorded run folder (``*_ascend_pt`` with ``msprof_raw/`` and the export)."""
    out = tmp_path_factory.mktemp("recorded")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    proc = subprocess.run(
        [sys.executable, "-c", RECORD, str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return Path(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def imported(recorded: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recorded run's torch_npu folder alone (what a real run on hardware leaves)."""
    return without_raw(recorded, tmp_path_factory.mktemp("imported"))
