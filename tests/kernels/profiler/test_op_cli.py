"""``msprof op``: end to end on a tiny script (one subprocess), and its one-line errors."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from msprof_py.cli import main

SCRIPT = """
import sys
import numpy as np
sys.path.insert(0, {samples!r})
from opprof_samples import tiled_exp
from msprof_py.kernels import launch

x = np.full(4 * 1024, 0.5, np.float16)
for depth in (1, 2):
    launch(tiled_exp, 2, x, np.zeros_like(x), 1024, 2, depth, name=f"exp_depth{{depth}}")
print("script args", sys.argv[1:])
"""


def _script(tmp_path: Path, body: str = SCRIPT) -> Path:
    path = tmp_path / "run_kernels.py"
    path.write_text(body.format(samples=str(Path(__file__).parent)))
    return path


def test_msprof_op_profiles_the_script_launches_end_to_end(tmp_path) -> None:
    script = _script(tmp_path)
    msprof = Path(sys.executable).with_name("msprof")
    out = subprocess.run(
        [str(msprof), "op", "--output", str(tmp_path / "out"), "--launch-count", "2",
         "python", str(script), "--flag", "1"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "script args ['--flag', '1']" in out.stdout
    assert "exp_depth1:" in out.stdout and "no-double-buffering" in out.stdout
    (run,) = (tmp_path / "out").glob("OPPROF_*")
    assert sorted(p.name for p in run.iterdir()) == [
        "0_exp_depth1", "1_exp_depth2", "summary.txt"
    ]  # fmt: skip
    with (run / "0_exp_depth1" / "PipeUtilization.csv").open() as fh:
        assert [r["block_id"] for r in csv.DictReader(fh)] == ["0", "1"]
    trace = json.loads((run / "1_exp_depth2" / "trace.json").read_text())
    assert any(e["ph"] == "X" for e in trace["traceEvents"])


def _error(capsys, *args: str) -> str:
    with pytest.raises(SystemExit) as exc:
        main(["op", *args])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    return err


def test_bad_input_gives_one_line_errors(tmp_path, capsys) -> None:
    assert "no such script: nope.py" in _error(capsys, "python", "nope.py")
    assert "runs a Python script" in _error(capsys, "python", "data.txt")
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    assert "no kernel was launched" in _error(capsys, "--output", str(tmp_path), str(empty))
    script = _script(tmp_path)
    err = _error(capsys, "--output", str(tmp_path), "--kernel-name", "gemm", "python", str(script))
    assert "no kernel named 'gemm'" in err and "exp_depth1, exp_depth2" in err
    broken = tmp_path / "broken.py"
    broken.write_text("raise ValueError('bad\\nshape')\n")
    assert "ValueError: bad shape" in _error(capsys, str(broken))
    assert not list(tmp_path.glob("OPPROF_*"))  # nothing written on errors
