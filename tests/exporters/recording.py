"""A small recorded, exported run (shared by the exporter and importer tests)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: a small training run on the simulated npu, plus ops that run on the AI CPU (int64
#: arithmetic, nonzero, sort); the session exports when it stops (SessionConfig.export)
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
    idx = torch.arange(64, device="npu")
    kept = torch.nonzero((idx * 3 + 1) - 40)
    values, order = torch.sort(torch.randn(256, device="npu"))
    loss.item()
print(session.stop())
"""


def record(output: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start recording :data:`RECORD` into ``output`` in a new process."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    full_env.update(env or {})
    return subprocess.Popen(
        [sys.executable, "-c", RECORD, str(output)],
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen) -> Path:
    """Wait for a recording; its run folder."""
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    return Path(out.strip().splitlines()[-1])
