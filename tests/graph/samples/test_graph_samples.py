"""The graph-mode samples show what they claim: graph mode launches one model per graph and
fuses, the two-tower stream plan beats one stream, and the scripts print their tables."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import resnet50_graph
import two_tower_graph

from msprof_py.adapter import runtime
from msprof_py.device import SimulatedNpu, TaskLog

ROOT = Path(__file__).resolve().parents[3]

#: the smallest ResNet with every block kind (a projection shortcut included)
TINY = resnet50_graph.Workload(batch=2, image=16, blocks=(1,), width=4, classes=3, steps=1)


def test_graph_variant_launches_two_graphs_and_fuses(npu: SimulatedNpu) -> None:
    runtime.state().compiled.clear()
    log = TaskLog()
    npu.subscribe(log)
    eager = resnet50_graph.run_variant("eager", False, False, TINY)
    npu.unsubscribe(log)
    eager_end = npu.engine.host_ns
    graph = resnet50_graph.run_variant("graph", True, False, TINY)
    assert eager.graph_launches == 0 and eager.reuse_ratio is None and eager.graphs == 0
    # one ModelExecute for the forward graph and one for the backward graph per step
    assert graph.graphs == 2 and graph.graph_launches == 2
    # the model's ops no longer launch one by one: what is left is the loss and the optimizer
    assert graph.launches < eager.launches
    assert graph.fused_kernels > 0 and graph.fused_nodes > graph.fused_kernels
    assert 0.0 < graph.reuse_ratio < 1.0
    # the modelled compile time: 20 ms per graph + 0.2 ms per op node, once (first step)
    assert graph.compile_ns > 2 * 20_000_000
    # the compiling first step is warm-up; the measured step is the last, compile-free one
    assert graph.warmup >= 1 and len(graph.step_ns) == graph.warmup + TINY.steps
    assert graph.measured_ns == graph.step_ns[-1:]
    assert graph.step_ns[-1] < graph.step_ns[0]
    assert graph.throughput == pytest.approx(TINY.batch / (graph.step_ns[-1] * 1e-9))
    # eager in a fresh compile cache: step 1 compiles (or tiles) every op key, and its warm-up
    # ends only once a step met no new key
    assert eager.warmup >= 1 and eager.op_compile_ns > 0
    spans = [r for r in log.host if r.name.startswith(("compile ", "tiling "))]
    assert sum(r.end_ns - r.start_ns for r in spans) == eager.op_compile_ns
    assert max(r.end_ns for r in spans) <= eager_end - eager.step_ns[-1]


def test_parallel_streams_shorten_the_two_tower_step(npu: SimulatedNpu) -> None:
    work = two_tower_graph.Workload.quick()
    log = TaskLog()
    npu.subscribe(log)
    multi = two_tower_graph.run(False, work)
    npu.unsubscribe(log)
    single = two_tower_graph.run(True, work)
    assert all(streams == 1 and events == 0 for streams, events in single.plans.values())
    forward = multi.plans["graph0_forward"]
    assert forward[0] == 2 and forward[1] >= 1  # one stream per tower, joined by an event
    assert multi.plans["graph0_backward"][0] > 1
    assert multi.mean_step_ns < single.mean_step_ns
    # in the multi-stream run, kernels of different streams really ran at the same time
    kernels = log.kernels()
    assert any(
        a.stream_id != b.stream_id and a.start_ns < b.end_ns and b.start_ns < a.end_ns
        for i, a in enumerate(kernels)
        for b in kernels[i + 1 : i + 40]
    )


def _script(name: str) -> str:
    result = subprocess.run(
        [sys.executable, str(ROOT / "sample_runs" / name), "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.mark.slow
def test_resnet50_script_prints_the_four_variants() -> None:
    out = _script("resnet50_graph.py")
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line[:5] in
            ("eager", "graph")}  # fmt: skip
    assert set(rows) >= {"eager", "eager+AMP", "graph", "graph+AMP"}
    assert rows["eager"][-1] == "-" and rows["graph"][-1].endswith("%")
    assert "graph+AMP vs eager+AMP" in out


@pytest.mark.slow
def test_two_tower_script_prints_both_plans() -> None:
    out = _script("two_tower_graph.py")
    assert "multi-stream" in out and "single stream" in out
    line = next(x for x in out.splitlines() if x.startswith("parallel streams shorten"))
    assert float(line.split("by ")[1].split("%")[0]) > 0
