"""``msprof op simulator``: one folder per compute unit (core{i}.cubecore0, core{i}.veccore{j})
with instr_exe / code_exe / trace.json, for a split mix kernel run in-process."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from msprof_py.cli import main

SCRIPT = """\
import numpy as np
from msprof_py.kernels import (CrossCoreSetFlag, CrossCoreWaitFlag, DataCopy, GetSubBlockIdx,
                               IsAic, IsAiv, Pipe, ScalarWork, TPipe, TPosition, TQue, launch)

def handoff(x):
    if IsAic():
        ScalarWork(500)
        CrossCoreSetFlag(0)
    if IsAiv():
        q = TQue(TPosition.VECIN, 1)
        TPipe().InitBuffer(q, 1, 8192)
        CrossCoreWaitFlag(0)
        DataCopy(q.AllocTensor("float16"), x[GetSubBlockIdx() * 4096:], 4096)

launch(handoff, 2, np.zeros(8192, np.float16), kernel_type="mix_aic_1_2")
"""


def _run(*args: str) -> None:
    try:
        main(["op", *args])
    except SystemExit as exc:
        assert exc.code in (None, 0)


def test_simulator_writes_a_folder_per_unit(tmp_path: Path, capsys) -> None:
    script = tmp_path / "run_mix.py"
    script.write_text(SCRIPT)
    _run("simulator", "--output", str(tmp_path / "out"), "python", str(script))
    (run,) = (tmp_path / "out").glob("OPPROF_*")
    sim = run / "0_handoff" / "simulator"
    units = sorted(p.name for p in sim.iterdir() if p.is_dir())
    # blocks 0 and 1 ran on cube cores 0 and 1, each with its two vector cores
    assert units == [f"core{c}.{u}" for c in (0, 1) for u in ("cubecore0", "veccore0", "veccore1")]
    assert (sim / "trace.json").is_file() and (run / "0_handoff" / "PipeUtilization.csv").is_file()
    with (sim / "core1.veccore1" / "core1.veccore1_instr_exe.csv").open() as fh:
        (copy,) = list(csv.DictReader(fh))
    # 8 KiB GM->UB (322 cycles) after the AIC's flag (500) and its latency (100)
    assert (copy["block"], copy["pipe"], copy["start_cycle"], copy["cycles"]) == (
        "1", "MTE2", "600", "322"
    )  # fmt: skip
    assert copy["source"] == "run_mix.py:13"
    with (sim / "core0.cubecore0" / "core0.cubecore0_code_exe.csv").open() as fh:
        (line,) = list(csv.DictReader(fh))
    assert (line["source"], line["cycles"], line["S_cycles"]) == ("run_mix.py:7", "500", "500")
    unit_trace = json.loads((sim / "core0.veccore0" / "trace.json").read_text())["traceEvents"]
    slices = [e for e in unit_trace if e["ph"] == "X"]
    assert [(e["args"]["unit"], e["pid"]) for e in slices] == [("aiv0", 0)]
    assert "op simulator" not in capsys.readouterr().err


def test_plain_msprof_op_writes_no_simulator_folder(tmp_path: Path) -> None:
    script = tmp_path / "run_mix.py"
    script.write_text(SCRIPT)
    _run("--output", str(tmp_path / "out"), "python", str(script))
    (run,) = (tmp_path / "out").glob("OPPROF_*")
    assert not (run / "0_handoff" / "simulator").exists()


def test_vector_only_blocks_name_their_vector_core() -> None:
    from msprof_py.kernels.results import InstrRecord
    from msprof_py.kernels.simlayout import unit_of

    class _R:
        core_type = "aiv"

    rec = InstrRecord(5, 5, "V", "Add", 0, 1, 0, "")
    assert unit_of(_R(), rec) == "core2.veccore1"  # type: ignore[arg-type]
