"""``msprof analyze --tune-batch``: the batch-size finding runs the auto batch tuner on the
recorded script and reports its measured batch, memory and throughput (real runs: slow)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
MIB = 2**20
#: a 50 MiB device: 80% is 40 MiB
DEVICE = 'base = "ascend910b"\n[memory]\nhbm_capacity_bytes = 52428800\nreserved_bytes = 0\n'


def _msprof(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "msprof_py.cli_entry", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=cwd)


@pytest.mark.slow
def test_analyze_tune_batch_reports_the_measured_batch(tmp_path: Path) -> None:
    """tiny_train.py at batch b keeps five b-MiB tensors live at the peak of a step (the
    input, the two Linear outputs, the ReLU output, the output's gradient). The allocator
    puts 1-10 MiB requests in 20 MiB segments, beside one 2 MiB segment of small blocks:
    batch 4 fills one segment (22 MiB, 44% of 50 MiB); batch 5 and 6 need two (42 MiB, 84%);
    batch 8 needs three (62 MiB: out of memory). Recorded at batch 2, the tuner tries 2, 4,
    8, 6, 5 and answers 4."""
    (tmp_path / "small.toml").write_text(DEVICE)
    script = HERE / "tiny_train.py"
    rec = _msprof("--output=prof", "--device=small.toml", "--no-report", "--export=none",
                  "python", str(script), "--batch-size", "2", cwd=tmp_path)  # fmt: skip
    assert rec.returncode == 0, rec.stderr[-2000:]
    (run,) = (tmp_path / "prof").glob("msprof_*")
    plain = _msprof("analyze", str(run), "--json", cwd=tmp_path)
    finding = next(
        f for f in json.loads(plain.stdout)["findings"] if f["rule"] == "low_utilisation"
    )
    command = finding["evidence"]["tune_command"]
    assert command.startswith(f"msprof tune-batch --device={tmp_path / 'small.toml'} ")
    assert f"'--application=python {script} --batch-size 2'" in command
    assert command in finding["advice"]
    done = _msprof("analyze", str(run), "--json", "--tune-batch", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    finding = next(f for f in json.loads(done.stdout)["findings"] if f["rule"] == "low_utilisation")
    ev = finding["evidence"]
    assert finding["status"] == "fired" and ev["best"] == 4
    trials = {t["batch"]: t for t in ev["tuner"]["trials"]}
    assert sorted(trials) == [2, 4, 5, 6, 8] and trials[8]["error"] == "out of memory"
    assert trials[4]["peak_gib"] * 1024 == pytest.approx(22)
    assert trials[6]["share"] == pytest.approx(0.84)
    assert "peak 22.0 MiB, 44.0% of the device" in finding["message"]
    assert ev["throughput"] == pytest.approx(trials[4]["samples_per_s"])
    assert ev["throughput_now"] == pytest.approx(trials[2]["samples_per_s"])
    assert "msprof tune-batch --device=" in done.stderr  # the command it ran, then the trials
