"""Fixtures of the exporter tests: real recorded runs (each in its own process)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.fixture(scope="session")
def recorded_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One single-card run, exported by the session when it stopped."""
    return finish(record(tmp_path_factory.mktemp("single")))


@pytest.fixture(scope="session")
def cluster_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two ranks (RANK=0/1, WORLD_SIZE=2) recorded side by side; their parent folder."""
    parent = tmp_path_factory.mktemp("cluster")
    procs = [record(parent, {"RANK": str(r), "WORLD_SIZE": "2"}) for r in (0, 1)]
    for proc in procs:
        finish(proc)
    return parent


#: the samples the advisor's compute split is checked on, small enough to record quickly
SAMPLE_ARGV = {
    "resnet": ["train_resnet.py", "--steps", "2", "--batch-size", "2"],
    "transformer": ["train_transformer.py", "--steps", "2", "--batch-size", "2", "--layers", "1"],
}


@pytest.fixture(scope="session")
def sample_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The ResNet and transformer samples, each recorded under ``msprof`` (in parallel)."""
    samples = Path(__file__).resolve().parents[2] / "sample_runs"
    parent = tmp_path_factory.mktemp("samples")
    procs = {}
    for name, (script, *args) in SAMPLE_ARGV.items():
        cmd = [sys.executable, "-m", "msprof_py.cli_entry", f"--output={parent / name}"]
        cmd += ["--no-report", "python", str(samples / script), *args]
        procs[name] = subprocess.Popen(
            cmd, cwd=parent, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    for name, proc in procs.items():
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"{name}: {out[-3000:]}"
    return {name: next((parent / name).glob("msprof_*")) for name in SAMPLE_ARGV}
