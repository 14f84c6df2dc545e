"""sample_runs/compare_cpu_npu.py: the transformer sample on CPU (torch.profiler) against the
simulated NPU (msprof), compared as a projection."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SAMPLE = Path(__file__).resolve().parents[2] / "sample_runs" / "compare_cpu_npu.py"


@pytest.mark.slow
def test_the_cpu_trace_and_the_npu_run_compare_op_by_op(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    done = subprocess.run(
        [sys.executable, str(SAMPLE), "--out", str(out), "--steps", "2", "--json"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout[done.stdout.index("{") :])
    assert result["mode"] == "projection"
    assert (out / "cpu" / "tinylm.pt.trace.json").is_file()
    ops = {(r["base_name"], r["match"]) for r in result["operators"]}
    # the model's matmuls and softmax are found on both sides by name and shapes
    matched = {name for name, how in ops if how == "name+shapes"}
    assert {"aten::mm", "aten::_softmax", "aten::native_layer_norm"} <= matched, sorted(matched)
    base_steps, new_steps = result["base"]["steps"], result["new"]["steps"]
    assert len(base_steps) == len(new_steps) == 2
