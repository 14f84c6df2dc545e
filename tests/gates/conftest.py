"""Recorded profiles shared by the gate tests: each recorded once per test session, all in
parallel, every one in its own ``msprof`` process, and their figures (analysed once).

- ``resnet_a``, ``resnet_b``: ``sample_runs/train_resnet.py --steps 3`` recorded twice
  when the (slow) determinism test is selected; otherwise ``resnet_b`` is a copy of
  ``resnet_a`` (the default run checks determinism in tests/damaged/test_determinism.py);
- ``regressed``: the same sample with a deliberate regression (:data:`REGRESSED`): an extra
  unfused op (a sigmoid) and pageable host-to-device copies in every step;
- made from those by copying rank folders and editing their ``meta.json`` (no recording):
  ``cluster`` (rank 0 = resnet_a, rank 1 = regressed), ``cluster_base`` (ranks 0 and 1 =
  resnet_a and resnet_b), ``measured`` (resnet_a, marked as recorded with measured host
  time), ``other_device`` (resnet_a, marked as recorded on ascend910a).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from msprof_py.profile.meta import sealed

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_runs"

#: train_resnet.py with a regression in the model's forward (the sample's own main() runs)
REGRESSED = f"""
import sys
import torch
sys.path.insert(0, {str(SAMPLES)!r})
import train_resnet

forward = train_resnet.ResNet.forward

def regressed(self, x):
    out = forward(self, x)
    torch.zeros(1 << 18).to(out.device)             # a pageable 1 MiB host-to-device copy
    bias = torch.zeros(out.shape[1]).to(out.device)  # and a small one
    return torch.sigmoid(out) + bias                 # an extra, unfused elementwise op

train_resnet.ResNet.forward = regressed
sys.exit(train_resnet.main(sys.argv[1:]))
"""

STEPS = ["--steps", "3"]


#: the test that compares two recordings of one sample (slow: one recording more)
TWICE_TEST = "test_the_same_sample_recorded_twice"


def _record(runs: dict[str, list[str]], folder: Path) -> dict[str, Path]:
    """Record each program under ``msprof`` in its own process, all at once."""
    procs = {}
    for name, argv in runs.items():
        cmd = [
            sys.executable,
            "-m",
            "msprof_py.cli_entry",
            f"--output={folder / name}",
            "--no-report",
            "python",
            *argv,
        ]
        procs[name] = subprocess.Popen(
            cmd, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    for name, proc in procs.items():
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"{name}: {out[-3000:]}"
    return {name: next((folder / name).glob("msprof_*")) for name in runs}


def _raw(run: Path) -> Path:
    return next(run.glob("*_ascend_pt/msprof_raw"))


def _copy(run: Path, dest: Path, rank: int = 0, world: int = 1, **meta: object) -> None:
    """Copy the raw profile of ``run`` into ``dest`` as rank ``rank``, with ``meta`` edits."""
    raw = dest / f"host_{rank}_ascend_pt" / "msprof_raw"
    shutil.copytree(_raw(run), raw)
    path = raw / "meta.json"
    info = json.loads(path.read_text(encoding="utf-8"))
    info.update({"rank": rank, "world_size": world, **meta})
    path.write_text(json.dumps(sealed(info)), encoding="utf-8")  # an edit the test means


@pytest.fixture(scope="session")
def runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """Name -> run folder of every profile described above."""
    folder = tmp_path_factory.mktemp("gate_runs")
    script = folder / "train_resnet_regressed.py"
    script.write_text(REGRESSED, encoding="utf-8")
    resnet = [str(SAMPLES / "train_resnet.py"), *STEPS]
    programs = {"resnet_a": resnet, "regressed": [str(script), *STEPS]}
    twice = any(item.name.startswith(TWICE_TEST) for item in request.session.items)
    if twice:
        programs["resnet_b"] = resnet
    out = _record(programs, folder)
    if not twice:
        copied = folder / "resnet_b" / out["resnet_a"].name
        shutil.copytree(out["resnet_a"], copied)
        out["resnet_b"] = copied
    made = {name: folder / name for name in ("cluster", "cluster_base", "measured", "other_device")}
    _copy(out["resnet_a"], made["cluster"], 0, 2)
    _copy(out["regressed"], made["cluster"], 1, 2)
    _copy(out["resnet_a"], made["cluster_base"], 0, 2)
    _copy(out["resnet_b"], made["cluster_base"], 1, 2)
    _copy(out["resnet_a"], made["measured"], host_time="measured")
    _copy(out["resnet_a"], made["other_device"], device="ascend910a")
    return out | made


@pytest.fixture(scope="session")
def figures_of(runs: dict[str, Path]) -> Callable[[str], dict]:
    """Name -> the gate figures of every rank of that run (analysed once, on first use)."""
    from msprof_py.analyzers import analyze
    from msprof_py.gates import all_ranks

    cache: dict[str, dict] = {}

    def get(name: str) -> dict:
        if name not in cache:
            cache[name] = all_ranks(analyze(runs[name]))
        return cache[name]

    return get


@pytest.fixture
def make_figures():
    """A factory of hand-made :class:`GateFigures`: neutral values, ``**changes`` applied."""
    from msprof_py.gates.figures import GateFigures

    def make(**changes: object) -> GateFigures:
        values: dict[str, object] = {
            "rank": 0,
            "steps": 3,
            "step_time_ms": 10.0,
            "device_time_ms": 8.0,
            "utilization": 0.8,
            "copy_ratio": 0.05,
            "copy_bytes_per_step": 1024.0,
            "exposed_copy_ms": 0.2,
            "communication_ms": 0.0,
            "communication_not_overlapped_ms": 0.0,
            "peak_memory_mb": 1000.0,
            "peak_allocated_mb": 900.0,
            "launches_per_step": 100.0,
            "syncs_per_step": 1.0,
            "sync_time_ms": 0.5,
            "op_type_time_ms": {"MatMul": 3.0, "Add": 1.0},
            "op_type_count_per_step": {"MatMul": 4.0, "Add": 10.0},
            "device": "ascend910b",
        }
        values.update(changes)
        return GateFigures(**values)  # type: ignore[arg-type]

    return make
