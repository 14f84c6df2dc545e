"""Public training programs, installed as libraries, run unmodified under msprof on the npu.

Hugging Face accelerate ships its own end-to-end check, ``accelerate.test_utils.scripts.
test_script``: it finds the device (torch_npu's way: ``import torch_npu``, ``torch.npu``), runs
dataloader, RNG-synchronisation and training checks, and trains its regression model under
fp32, bf16 and fp16 mixed precision, asserting the results equal a CPU-side baseline. Nobody here
wrote it; it must pass on the simulated npu under msprof and leave a loadable profile.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import msprof_py

pytest.importorskip("accelerate")


def test_accelerate_test_script_passes_under_msprof(tmp_path: Path) -> None:
    msprof = shutil.which("msprof", path=str(Path(sys.executable).parent))
    assert msprof is not None
    run = subprocess.run(
        [
            msprof,
            f"--output={tmp_path}",
            "python",
            "-m",
            "accelerate.test_utils.scripts.test_script",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-3000:]
    assert "Device: npu" in out  # accelerate chose the npu, not the CPU
    assert out.count("Training yielded the same results") == 4
    assert "BF16 training check." in out and "FP16 training check." in out
    assert "Traceback" not in out
    profile = msprof_py.load(next(tmp_path.glob("msprof_*")))
    tasks = profile.tasks
    assert len(tasks) > 1000
    assert {"Mul", "Add", "MEMCPY_H2D"} <= set(tasks["op_type"]) | set(tasks["name"])
