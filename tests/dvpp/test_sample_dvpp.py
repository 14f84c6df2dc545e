"""sample_runs/train_dvpp.py --quick: the three pipelines train, DVPP tasks reach a recorded
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
        cpu, dvpp, ahead = train_dvpp.main(["--quick"])
    out = capsys.readouterr().out
    # --quick: 12 images, batch 4, 2 steps; each dvpp step is one batch decode and one batch
    # crop-resize of its 4 images; prefetching prepares the same batches one step ahead, and
    # the third batch during the last step
    assert (cpu.images, dvpp.images, ahead.images) == (8, 8, 8) and len(dvpp.step_ns) == 2
    assert cpu.dvpp_tasks == 0 and dvpp.dvpp_tasks == 2 * 2 and ahead.dvpp_tasks == 3 * 2
    # the same crops are drawn in the same order with num_workers=0: the same losses
    assert cpu.losses == dvpp.losses == ahead.losses
    rate = train_dvpp.pipeline_images_per_s(dvpp, 0)
    assert rate == 8 / (dvpp.dvpp_busy_ns / 1e9)
    row = next(line for line in out.splitlines() if line.startswith("dvpp "))
    assert f"{rate:.0f}" in row and "not a measured or quoted speedup" in out
    tasks = rec.load().tasks
    dv = tasks[tasks["task_type"] == "DVPP"]
    assert sorted(dv["op_type"].value_counts().items()) == [("CropResize", 5), ("JpegDecode", 5)]
    assert (dv["kind"] == "dvpp").all()
