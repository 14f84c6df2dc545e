"""A recorded graph-mode run: the plans in the profile, fusion_result.json, the analysis and
the Ascend export (one small CNN, compiled with backend="npu", recorded once)."""

from __future__ import annotations

import csv
import gc
import json
from pathlib import Path

import pytest
import torch
from graph_models import cnn

import msprof_py
from msprof_py.graph import backend
from msprof_py.graph.runner import compiled_graphs
from msprof_py.profile.graphs import task_graphs

STEPS = 3


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, npu) -> dict:
    """Record three training steps of the compiled CNN (exported); the plans it made."""
    backend.reset()
    gc.collect()
    before = set(compiled_graphs())  # graphs of earlier tests may still be alive
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("graph_run")
    with msprof_py.record(output=out, host_time="modeled", export=True) as rec:
        model = cnn().to("npu")
        step = torch.compile(model, backend="npu")
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(2, 3, 8, 8).to("npu")
        for _ in range(STEPS):
            opt.zero_grad()
            step(x).square().mean().backward()
            opt.step()
    plans = {g.name: g.plans for g in set(compiled_graphs()) - before}
    result = {"path": rec.run_dir, "profile": rec.load(), "plans": plans}
    torch._dynamo.reset()
    return result


def test_every_plan_is_a_graphs_row_with_its_passes_and_kernels(run: dict) -> None:
    p = run["profile"]
    made = [(name, plan) for name, plans in run["plans"].items() for plan in plans]
    assert len(p.graphs) == len(made) >= 2
    for name, plan in made:
        rows = p.graphs[p.graphs["graph"] == name]
        row = rows.iloc[[plan.kernels == q.kernels for q in run["plans"][name]].index(True)]
        assert row["kernels"] == len(plan.kernels)
        assert row["fused_kernels"] == sum(1 for k in plan.kernels if k.pass_name)
        assert row["workspace_bytes"] == plan.memory.workspace_bytes
        assert row["no_reuse_bytes"] == plan.memory.no_reuse_bytes
        assert row["reuse_ratio"] == pytest.approx(plan.memory.reuse_ratio)
        assert row["streams"] == plan.streams and row["events"] == plan.events
        assert row["recompile_limit"] == 8 and row["compiles"] >= 1
        kernels = p.graph_kernels[p.graph_kernels["plan_id"] == row["plan_id"]]
        assert list(kernels["name"]) == [k.name for k in plan.kernels]
        assert list(kernels["stream"]) == [k.stream for k in plan.kernels]
        passes = p.graph_passes[p.graph_passes["plan_id"] == row["plan_id"]]
        assert list(passes["pass_name"]) == [r.pass_name for r in plan.records]
        assert list(passes["hit"]) == [r.hit for r in plan.records]
    # the training forward fuses BN+ReLU (no convolution reads the ReLU here)
    fwd = p.graph_passes[p.graph_passes["graph"].str.endswith("_forward")]
    assert (fwd["pass_name"] == "ZBNupdateReluV2Conv2DBNreducePass").any() and fwd["hit"].all()


def test_first_plans_carry_the_compile_time_of_their_span(run: dict) -> None:
    p = run["profile"]
    spans = p.host_events[p.host_events["name"].str.startswith("compile ")]
    first = p.graphs[~p.graphs["replan"]]
    by_graph = dict(
        zip(spans["name"].str.slice(8), spans["end_ns"] - spans["start_ns"], strict=True)
    )
    assert dict(zip(first["graph"], first["compile_ns"], strict=True)) == by_graph


def test_graph_tasks_are_attributed_to_their_graph(run: dict) -> None:
    p = run["profile"]
    graph = task_graphs(p.tasks, p.host_events)
    kernels = p.graph_kernels
    for name in set(graph) - {""}:
        names = set(p.tasks.loc[graph == name, "name"])
        assert names <= set(kernels.loc[kernels["graph"] == name, "name"])
    assert (graph == "").any()  # the optimizer step runs eagerly


def test_fusion_result_json_in_the_run_folder_and_the_export(run: dict) -> None:
    path: Path = run["path"]
    doc = json.loads((path / "fusion_result.json").read_text())
    exported = json.loads((path / "ASCEND_PROFILER_OUTPUT" / "fusion_result.json").read_text())
    assert doc == exported
    p = run["profile"]
    assert [e["graph"] for e in doc] == list(p.graphs.sort_values("plan_id")["graph"])
    for entry in doc:
        passes = entry["passes"]
        for name, counts in entry["graph_fusion"].items():
            mine = [x for x in passes if x["pass_name"] == name]
            assert counts == {
                "match_times": str(len(mine)),
                "effect_times": str(sum(x["hit"] for x in mine)),
            }


def test_kernel_details_show_the_graph_node_names(run: dict) -> None:
    path: Path = run["path"]
    with open(path / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", newline="") as f:
        names = {row["Name"] for row in csv.DictReader(f)}
    planned = set(run["profile"].graph_kernels["name"])
    assert "_native_batch_norm_legit_functional" in planned
    assert planned & names and "_native_batch_norm_legit_functional" in names


def test_msprof_analyze_advisor_reads_the_compiled_export(run: dict, tmp_path: Path) -> None:
    pytest.importorskip("msprof_analyze")
    from msprof_analyze_cli import advisor_problems

    problems = advisor_problems(run["path"], tmp_path)
    summary = problems["Overall Summary"][1]
    assert "Computing Time is 0.0ms" not in summary and "Free Time" in summary
    # the advisor ranks the graph's kernels, fused ones included, by their CANN types
    with open(run["path"] / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", newline="") as f:
        types = {row["Type"] for row in csv.DictReader(f)}
    block_dim = problems["Block Dim Issues"][1]
    assert "Conv2D" in block_dim and any(t in block_dim for t in types - {"Conv2D"})


@pytest.fixture(scope="module")
def analysis(run: dict):
    """The run analysed once, every step included."""
    return msprof_py.analyze(run["path"], warmup=0, keep_outliers=True)


def test_analysis_splits_the_step_and_describes_the_graphs(run: dict, analysis) -> None:
    a = analysis
    summary = a.graphs["summary"][0]
    assert summary["compiled"] is True and summary["graphs"] == len(run["plans"])
    p = run["profile"]
    graph = task_graphs(p.tasks, p.host_events)
    dur = p.tasks["end_ns"] - p.tasks["start_ns"]
    assert summary["graph_device_ns_per_step"] == pytest.approx(dur[graph != ""].sum() / STEPS)
    assert summary["eager_device_ns_per_step"] == pytest.approx(dur[graph == ""].sum() / STEPS)
    # two graph calls per step (forward and backward)
    assert summary["graph_calls_per_step"] == 2
    table = a.graphs["graphs"]
    last = p.graphs.sort_values("plan_id").groupby("graph").tail(1).set_index("graph")
    for r in table.itertuples():
        assert r.fused_kernels == last.loc[r.graph, "fused_kernels"]
        assert r.reuse_ratio == pytest.approx(last.loc[r.graph, "reuse_ratio"])
    doc = a.to_json()
    assert doc["graphs"]["summary"][0]["graphs"] == summary["graphs"]
    conv = a.finding("fusion_conv_bn_relu")
    assert "ZBNupdateReluV2Conv2DBNreducePass fired" in conv.message


def test_graph_kernels_name_the_module_their_nodes_ran_in(run: dict) -> None:
    """Forward kernels carry the nn.Module of their graph node (Dynamo's nn_module_stack), so
    an AI CPU counter increment in a compiled BatchNorm is framework state, as in eager."""
    from msprof_py.analyzers import aicpu
    from msprof_py.analyzers.context import prepare

    p = run["profile"]
    fwd = p.graph_kernels[p.graph_kernels["graph"].str.endswith("_forward")]
    by_op = dict(
        zip(fwd["op_type"], zip(fwd["module"], fwd["module_path"], strict=True), strict=False)
    )
    assert by_op["Conv2D"] == ("Sequential/Conv2d", "0")
    linear = fwd[fwd["module"].str.endswith("Linear")]
    assert not linear.empty and set(linear["module_path"]) == {"4"}
    counters = fwd[(fwd["op_type"] == "Add") & (fwd["task_type"] == "AI_CPU")]
    assert len(counters) == (fwd["index"] == 0).sum()  # one per forward plan
    assert set(counters["module"]) == {"Sequential/BatchNorm2d"}
    assert set(counters["module_path"]) == {"1"}
    bwd = p.graph_kernels[p.graph_kernels["graph"].str.endswith("_backward")]
    assert (bwd["module_path"] == "").all()  # AOT backward nodes carry no module stack
    data = prepare(p, rank=0)
    assert set(aicpu.tasks(data)["source"]) == {"BatchNorm2d"}


def _cells(t: dict) -> list[dict[str, str]]:
    """A report table's rows as {header: shown text}."""
    names = [c["name"] for c in t["columns"]]
    return [dict(zip(names, (v[0] for v in row), strict=True)) for row in t["rows"]]


def test_report_graph_section_lists_each_graph_by_its_last_plan(run: dict, analysis) -> None:
    from msprof_py.report.graphs import graph_section
    from msprof_py.report.tables import size

    section = graph_section(run["profile"], analysis)
    assert section is not None
    rows = {r["Graph"]: r for r in _cells(section["graphs"])}
    assert set(rows) == set(run["plans"])
    for name, plans in run["plans"].items():
        plan, row = plans[-1], rows[name]
        ops = [n for n in plan.graph.nodes if n.is_op]
        assert row["Op nodes (before passes)"] == str(len(ops))
        computed = {m for k in plan.kernels for m in k.members}
        assert row["Nodes in kernels (after passes)"] == str(len(computed)) and computed
        assert row["Kernels eager"] == str(sum(len(n.kernels) for n in ops))
        assert row["Kernels launched"] == str(len(plan.kernels))
        fused = sorted(k.pass_name for k in plan.kernels if k.pass_name)
        assert row["Fused kernels"] == str(len(fused))
        assert row["Fused kernels by pass"] == ", ".join(
            f"{p} {fused.count(p)}" for p in sorted(set(fused))
        )
        assert row["Pass hits"] == str(sum(r.hit for r in plan.records))
        assert row["Pass misses"] == str(sum(not r.hit for r in plan.records))
        assert row["Workspace (reuse)"] == size(plan.memory.workspace_bytes)
        assert row["Workspace (no reuse)"] == size(plan.memory.no_reuse_bytes)
        assert row["Reuse ratio"] == f"{plan.memory.reuse_ratio * 100:.1f}%"
        assert row["Streams"] == str(plan.streams) and row["Events"] == str(plan.events)
        assert row["Calls per step"] == "1"  # one forward and one backward call a step
    # the pass table: every (pass, outcome) of the last plans, the fusion among them
    passes = _cells(section["passes"])
    assert {(r["Graph"], r["Pass"], r["Outcome"]) for r in passes} == {
        (name, r.pass_name, "hit" if r.hit else "miss")
        for name, plans in run["plans"].items()
        for r in plans[-1].records
    }
    # compiled vs eager: the analysis's split, the shares summing to one
    s = analysis.graphs["summary"][0]
    split = {r["Part"]: r for r in _cells(section["split"])}
    assert split["compiled graphs"]["Device time per step (us)"] == (
        f"{s['graph_device_ns_per_step'] / 1e3:,.1f}"
    )
    assert (
        split["eager"]["Device time per step (us)"] == f"{s['eager_device_ns_per_step'] / 1e3:,.1f}"
    )
    share = s["graph_device_share"]
    assert split["compiled graphs"]["Share of device time"] == f"{share * 100:.1f}%"
    assert split["eager"]["Share of device time"] == f"{(1 - share) * 100:.1f}%"


@pytest.mark.slow
def test_html_report_has_the_graph_mode_section(run: dict, analysis) -> None:
    from msprof_py.report.build import build_html

    html = build_html(run["profile"], analysis)
    assert '<section id="graph-mode">' in html and 'href="#graph-mode"' in html
    for name in run["plans"]:
        assert f'<td data-v="{name}">{name}</td>' in html
