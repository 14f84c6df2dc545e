"""Fixtures of the exporter tests: real recorded runs (each in its own process)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from recording import finish, record


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
