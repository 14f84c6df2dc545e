"""Recorded profiles shared by the gate tests: each recorded once per test session, all in
parallel, every one in its own ``msprof`` process.

- ``resnet_a``, ``resnet_b``: ``sample_runs/train_resnet.py --steps 3`` recorded twice
  (determinism);
- ``base``: :data:`TINY`, a small MLP; ``extra_op``: the same with an unfused elementwise
  op per step (a ``Mul`` and an ``Add``); ``pageable``: the same with a pageable host-to-device
  copy per step;
- made from those by copying rank folders and editing their ``meta.json`` (no recording):
  ``cluster`` (rank 0 = base, rank 1 = extra_op), ``cluster_base`` (two base ranks),
  ``measured`` (base, marked as recorded with measured host time), ``other_device`` (base,
  marked as recorded on ascend910a).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

TINY = """
import argparse, torch
p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=4)
p.add_argument("--extra-op", action="store_true", help="an unfused elementwise op per step")
p.add_argument("--pageable", action="store_true", help="a pageable H2D copy per step")
a = p.parse_args()
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)
).to("npu")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(32, 64).to("npu")
y = torch.randint(0, 8, (32,)).to("npu")
for _ in range(a.steps):
    opt.zero_grad()
    out = model(x)
    if a.extra_op:
        out = out * 1.0001 + 0.0
    if a.pageable:
        x = torch.randn(32, 64).to("npu")
    loss = torch.nn.functional.cross_entropy(out, y)
    loss.backward()
    opt.step()
"""

RESNET = [str(ROOT / "sample_runs" / "train_resnet.py"), "--steps", "3"]


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
    path.write_text(json.dumps(info), encoding="utf-8")


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Name -> run folder of every profile described above."""
    folder = tmp_path_factory.mktemp("gate_runs")
    tiny = folder / "tiny.py"
    tiny.write_text(TINY, encoding="utf-8")
    out = _record(
        {
            "resnet_a": RESNET,
            "resnet_b": RESNET,
            "base": [str(tiny)],
            "extra_op": [str(tiny), "--extra-op"],
            "pageable": [str(tiny), "--pageable"],
        },
        folder,
    )
    made = {name: folder / name for name in ("cluster", "cluster_base", "measured", "other_device")}
    _copy(out["base"], made["cluster"], 0, 2)
    _copy(out["extra_op"], made["cluster"], 1, 2)
    _copy(out["base"], made["cluster_base"], 0, 2)
    _copy(out["base"], made["cluster_base"], 1, 2)
    _copy(out["base"], made["measured"], host_time="measured")
    _copy(out["base"], made["other_device"], device="ascend910a", device_origin="preset")
    return out | made


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
