"""trace.json (a slice per instruction), findings on kernels built to trigger each rule, the
tiling sweep."""

from __future__ import annotations

import json

import numpy as np
from opprof_samples import scalar_heavy, tiled_exp, uneven

from msprof_py.kernels import launch
from msprof_py.kernels.opprof import OpProfiler, profile_launch
from msprof_py.kernels.sweep import tiling_sweep


def _rules(result) -> set[str]:
    return {f.rule for f in profile_launch(result).findings}


def _exp(blocks: int, tile: int, tiles: int, depth: int, exps: int = 1):
    x = np.full(blocks * tile * tiles, 0.5, np.float16)
    z = np.zeros_like(x)
    return launch(tiled_exp, blocks, x, z, tile, tiles, depth, exps)


def test_trace_json_has_a_process_per_core_a_thread_per_pipe_and_a_slice_per_instruction(
    tmp_path,
) -> None:
    result = _exp(3, 1024, 4, 2)
    folder = profile_launch(result).write(tmp_path / "k")
    doc = json.loads((folder / "trace.json").read_text())
    events = doc["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    instrs = result.instructions()
    assert len(slices) == len(instrs) > 0
    us_per_cycle = 1e6 / result.chip.clock_hz
    for e, r in zip(slices, instrs, strict=True):  # in launch time order
        assert e["name"] == r.name and e["pid"] == r.core
        assert abs(e["ts"] - r.start * us_per_cycle) < 1e-9
        assert abs(e["dur"] - r.cycles * us_per_cycle) < 1e-9
    procs = {e["pid"] for e in events if e["name"] == "process_name"}
    assert procs == {c.core for c in result.core_results} and len(procs) == 3
    threads = {(e["pid"], e["args"]["name"]) for e in events if e["name"] == "thread_name"}
    for e in slices:  # every slice sits on the thread named after its pipe
        names = {n for p, n in threads if p == e["pid"]}
        assert e["cat"] in names
    for name in ("PipeUtilization.csv", "instr_exe.csv", "roofline.json", "findings.txt"):
        assert (folder / name).is_file()
    rows = (folder / "instr_exe.csv").read_text().splitlines()
    assert len(rows) == len(instrs) + 1


def test_depth_one_queues_alternating_mte2_and_v_are_flagged_depth_two_is_not() -> None:
    single = _exp(1, 2048, 8, 1, exps=4)
    double = _exp(1, 2048, 8, 2, exps=4)
    assert "no-double-buffering" in _rules(single)
    assert "no-double-buffering" not in _rules(double)
    assert double.total_cycles < single.total_cycles  # and the fix pays


def test_mte2_bound_with_idle_vector_is_flagged_compute_heavy_is_not() -> None:
    assert "mte2-bound" in _rules(_exp(1, 1024, 4, 2))  # small copies, one Exp each
    assert "mte2-bound" not in _rules(_exp(1, 8192, 4, 2, exps=40))


def test_scalar_heavy_kernel_is_flagged_scalar_bound() -> None:
    x = np.ones(1024, np.float16)
    result = launch(scalar_heavy, 1, x, np.zeros_like(x), 1024)
    assert _rules(result) == {"scalar-bound"}
    assert "scalar-bound" not in _rules(_exp(1, 1024, 4, 2))


def test_unbalanced_blocks_are_flagged_balanced_ones_are_not() -> None:
    x = np.ones(4 * 1024 * 4, np.float16)
    result = launch(uneven, 4, x, np.zeros_like(x), 1024)
    (finding,) = [f for f in profile_launch(result).findings if f.rule == "unbalanced-blocks"]
    assert "block 0" in finding.message
    assert "unbalanced-blocks" not in _rules(_exp(4, 1024, 4, 2))


def test_op_profiler_filters_by_name_and_stops_at_the_launch_count() -> None:
    with OpProfiler(kernel_name="tiled_*", launch_count=2) as prof:
        for _ in range(3):
            _exp(1, 1024, 1, 1)
        x = np.ones(1024, np.float16)
        launch(scalar_heavy, 1, x, np.zeros_like(x), 1024)
    assert [p.name for p in prof.profiles] == ["tiled_exp", "tiled_exp"]
    assert prof.launched == ["tiled_exp"] * 3 + ["scalar_heavy"]
    _exp(1, 1024, 1, 1)  # after the block: not seen
    assert len(prof.launched) == 4


def test_tiling_sweep_reports_the_fastest_tile_and_keeps_failures() -> None:
    total = 64 * 1024
    x = np.full(total, 0.25, np.float16)

    def build(tile: int):
        return tiled_exp, 1, (x, np.zeros_like(x), tile, total // tile, 2)

    tiles = [1024, 4096, 16384, 65536]  # the last needs 4 x 128 KiB of UB: overflow
    sweep = tiling_sweep(build, tiles)
    assert "UB overflow" in sweep.rows[-1].error
    ran = {r.tile: r.duration_us for r in sweep.rows if not r.error}
    assert sweep.best.duration_us == min(ran.values())
    direct = launch(*build(sweep.best.tile)[:2], *build(sweep.best.tile)[2])
    assert direct.duration_us == sweep.best.duration_us
    table = sweep.table()
    assert len(table.splitlines()) == len(tiles) + 1 and " *" in table
