"""sample_runs/train_dvpp.py --quick: both pipelines train, DVPP tasks reach a recorded
profile, and the printed table holds what the model computed."""

from __future__ import annotations

import sys
from pathlib import Path

import msprof_py

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "sample_runs"))


def test_quick_sample_records_dvpp_tasks(tmp_path, capsys) -> None:
    import train_dvpp

    with msprof_py.record(output=tmp_path) as rec:
        cpu, dvpp = train_dvpp.main(["--quick"])
    out = capsys.readouterr().out
    # --quick: 8 images, batch 4, 2 steps; each dvpp step is one batch decode + 4 crops
    assert (cpu.images, dvpp.images) == (8, 8) and len(dvpp.step_ns) == 2
    assert cpu.dvpp_tasks == 0 and dvpp.dvpp_tasks == 2 * (1 + 4)
    # the same crops are drawn in the same order with num_workers=0: the same losses
    assert cpu.losses == dvpp.losses
    rate = train_dvpp.pipeline_images_per_s(dvpp, 0)
    assert rate == 8 / (dvpp.dvpp_busy_ns / 1e9)
    row = next(line for line in out.splitlines() if line.startswith("dvpp"))
    assert f"{rate:.0f}" in row and "not a measured or quoted speedup" in out
    tasks = rec.load().tasks
    dv = tasks[tasks["task_type"] == "DVPP"]
    assert sorted(dv["op_type"].value_counts().items()) == [("CropResize", 8), ("JpegDecode", 2)]
    assert (dv["kind"] == "dvpp").all()
