"""Recorded runs: the dynamic_shapes rule, the OP State column, msprof-analyze's check."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
from msprof_analyze_cli import advisor_problems

import msprof_py
from msprof_py.adapter.compile_cache import CompileCache
from msprof_py.device import SimulatedNpu

VARIABLE = (3, 5, 7, 9, 11)  # rows per step: a new shape every step
STATIC = (4, 4, 4, 4, 4)


def _train(rows: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4).to("npu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for n in rows:
        opt.zero_grad()
        loss = model(torch.randn(n, 8).to("npu")).square().mean()
        loss.backward()
        opt.step()
        loss.item()


def _record(folder: Path, cache: CompileCache, jit: bool, rows: tuple[int, ...]) -> Path:
    cache.clear()
    cache.set_mode(jit)
    with msprof_py.record(folder, export=True) as rec:
        _train(rows)
    assert rec.run_dir is not None
    return rec.run_dir


def _finding(run: Path):
    (found,) = [f for f in msprof_py.analyze(run).findings if f.rule == "dynamic_shapes"]
    return found


def _op_states(run: Path) -> set[str]:
    with open(run / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", newline="") as f:
        return {row["OP State"] for row in csv.DictReader(f)}


def test_the_rule_fires_on_a_variable_shape_loop_in_jit_mode(
    npu: SimulatedNpu, cache: CompileCache, tmp_path: Path
) -> None:
    run = _record(tmp_path, cache, True, VARIABLE)
    f = _finding(run)
    assert f.status == "fired", f.message
    compile_us = npu.spec.compile.online_compile_ns / 1e3
    builds = f.evidence["builds_per_step"]
    assert builds >= 1
    # every build is one online compile of the spec's cost
    assert f.evidence["time_us"] == pytest.approx(builds * compile_us)
    shapes = {r["op_type"]: r["shapes"] for r in f.evidence["shapes_per_op"]}
    # per analysed step (the first is left out) two MatMuls on new shapes: the forward x @ W.T
    # and the weight gradient (x needs no gradient)
    assert shapes["MatMul"] == 2 * (len(VARIABLE) - 1)
    assert "set_compile_mode(jit_compile=False)" in f.advice and "buckets" in f.advice
    assert _op_states(run) == {"static"}


def _trace_names(run: Path) -> list[str]:
    with open(run / "ASCEND_PROFILER_OUTPUT" / "trace_view.json", encoding="utf-8") as f:
        return [e.get("name", "") for e in json.load(f)]


def test_online_compiles_are_acl_op_compile_events_in_the_trace(
    npu: SimulatedNpu, cache: CompileCache, tmp_path: Path
) -> None:
    run = _record(tmp_path, cache, True, VARIABLE[:2])
    host = msprof_py.load(run).host_events
    compiles = host[(host["kind"] == "api") & host["name"].str.startswith("compile ")]
    events = [n for n in _trace_names(run) if n == "AscendCL@aclopCompileAndExecute"]
    assert len(events) == len(compiles) == cache.stats().compiles > 0


def test_the_rule_stays_quiet_on_a_static_loop(
    npu: SimulatedNpu, cache: CompileCache, tmp_path: Path
) -> None:
    f = _finding(_record(tmp_path, cache, True, STATIC))
    assert f.status == "ok", f.message
    assert f.evidence["builds_per_step"] == 0 and f.evidence["varying_ops"] == 0


def test_binary_kernels_are_dynamic_and_only_tile(
    npu: SimulatedNpu, cache: CompileCache, tmp_path: Path
) -> None:
    run = _record(tmp_path, cache, False, VARIABLE)
    assert _op_states(run) == {"dynamic"}
    f = _finding(run)
    tiling_us = npu.spec.compile.tiling_ns / 1e3
    assert f.evidence["time_us"] == pytest.approx(f.evidence["builds_per_step"] * tiling_us)
    assert f.evidence["dynamic_share"] == 1.0
    if f.status == "fired":
        assert "set_compile_mode" not in f.advice and "buckets" in f.advice


def _advisor_problems(run: Path, cwd: Path) -> set[str]:
    return set(advisor_problems(run, cwd))


@pytest.mark.slow  # the real advisor takes a while on a 2-core machine
def test_msprof_analyze_reads_op_state_and_the_compiles(
    npu: SimulatedNpu, cache: CompileCache, tmp_path: Path
) -> None:
    pytest.importorskip("msprof_analyze")
    binary = _advisor_problems(_record(tmp_path / "binary", cache, False, STATIC), tmp_path)
    jit = _advisor_problems(_record(tmp_path / "jit", cache, True, VARIABLE), tmp_path)
    # every kernel dynamic (binary kernels): its dynamic-shape check fires
    assert "Operator Dynamic Shape Issues" in binary
    assert "Operator Dynamic Shape Issues" not in jit
    # 20 or more AscendCL@aclopCompileAndExecute events: its dispatch check fires
    assert "Operator Dispatch Issues" in jit
    assert "Operator Dispatch Issues" not in binary


def test_each_recording_starts_with_an_empty_cache(
    npu: SimulatedNpu, cache: CompileCache, tmp_path: Path
) -> None:
    cache.set_mode(False)
    counts = []
    for k in range(2):
        with msprof_py.record(tmp_path / str(k)) as rec:
            _train(STATIC[:2])
        host = rec.load().host_events
        counts.append(int(host["name"].str.startswith("tiling ").sum()))
    assert counts[0] == counts[1] == cache.stats().tilings > 0
