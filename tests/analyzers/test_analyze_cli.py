"""``msprof analyze``: terminal summary, the --json schema, --csv, errors; the Python API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from analyze_helpers import Builder, chain, cluster, save
from click.testing import CliRunner

from msprof_py.analyzers import analyze
from msprof_py.analyzers.command import AnalyzeError
from msprof_py.analyzers.command import analyze as command
from msprof_py.analyzers.findings import rule_specs
from msprof_py.analyzers.schema import FINDING_KEYS, HEADLINE_KEYS, TABLES, TOP_LEVEL

#: the documented sections and their tables (a change here is a schema change)
SCHEMA = {
    "top_ops": ["by_type", "by_name", "host"],
    "copy": ["summary", "by_direction"],
    "compute_density": ["ops", "classes", "utilisation", "roofline"],
    "step_breakdown": ["steps", "idle", "gaps"],
    "sync": ["summary", "points"],
    "memory": ["summary", "steps", "timeline"],
    "formats": ["summary", "transdata", "padding"],
    "communication": ["summary", "collectives", "ranks", "slow_rank"],
    "graphs": ["summary", "graphs", "passes"],
}


def rank_builder(rank: int = 0, slow: bool = False) -> Builder:
    b = Builder(rank=rank)
    t = 0
    for step in range(3):
        b.step(step, t, t + 60_000 + (20_000 if slow else 0))
        b.event("annotation", "Optimizer.step#SGD.step", t + 40_000, t + 50_000, step=step)
        chain(
            b,
            t,
            step=step,
            ops=[
                (
                    "aten::convolution_overrideable",
                    "8,3,32,32;16,3,3,3",
                    "8,16,32,32",
                    {"op_type": "Conv2D", "task_type": "AI_CORE", "bytes": 600_000},
                ),
                ("aten::native_batch_norm", "8,16,32,32;16;16;16;16", "8,16,32,32", {}),
                ("aten::relu_", "8,16,32,32", "8,16,32,32", {}),
            ],
        )
        b.mem(t + 100, 1 << 20, 2 << 20, step=step)
        t += 60_000 + (20_000 if slow else 0)
    return b


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save(rank_builder().build(), tmp_path_factory.mktemp("run"))


@pytest.fixture(scope="module")
def cluster_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    profile = cluster(rank_builder(0), rank_builder(1, slow=True))
    return save(profile, tmp_path_factory.mktemp("cluster"))


def invoke(*args: str):
    return CliRunner().invoke(command, [str(a) for a in args])


def test_terminal_summary(run_dir: Path) -> None:
    out = invoke(run_dir)
    assert out.exit_code == 0, out.output
    assert "mean step" in out.output and "findings" in out.output
    assert "Conv + BatchNorm (+ ReLU) run as separate kernels" in out.output
    assert "SKIPPED: one rank only" in out.output


def test_json_schema_is_stable(run_dir: Path) -> None:
    out = invoke(run_dir, "--json", "--top", "3")
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert list(doc) == TOP_LEVEL
    assert doc["schema_version"] == 2
    assert list(doc["headline"]) == HEADLINE_KEYS
    assert doc["headline"]["estimated_gain_model"] == "bound"
    # the Conv+BN+ReLU chains are the only replayable change that fires: the joint is its gain
    fusion = next(f for f in doc["findings"] if f["rule"] == "fusion_conv_bn_relu")
    assert doc["headline"]["joint_gain_rules"] == ["fusion_conv_bn_relu"]
    assert doc["headline"]["joint_gain_us"] == pytest.approx(fusion["estimated_gain_us"])
    for key in ("median_step_ns", "step_windows", "outlier_steps", "notes", "steps_from"):
        assert key in doc["profile"], key
    for section, tables in SCHEMA.items():
        assert list(doc[section]) == tables, section
    for name, columns in TABLES.items():
        value = doc
        for part in name.split("."):
            value = value[part]
        assert isinstance(value, list), name
        for row in value:
            assert list(row) == columns, name
    assert len(doc["top_ops"]["by_type"]) <= 3
    assert [f["rule"] for f in doc["findings"]] != []
    assert {f["rule"] for f in doc["findings"]} == set(rule_specs())
    for f in doc["findings"]:
        assert list(f) == FINDING_KEYS
        assert f["status"] in ("fired", "ok", "skipped")
        assert f["priority"] in ("high", "medium", "low", None)
        assert (f["priority"] is None) == (f["status"] != "fired")
        assert isinstance(f["evidence"], dict)
        assert f["gain_model"] in ("modelled", "heuristic", None)
    statuses = [f["status"] for f in doc["findings"]]
    assert statuses == sorted(statuses, key=["fired", "ok", "skipped"].index)


def test_csv_writes_every_table(run_dir: Path, tmp_path: Path) -> None:
    out = invoke(run_dir, "--csv", tmp_path / "csv")
    assert out.exit_code == 0, out.output
    names = {p.name for p in (tmp_path / "csv").iterdir()}
    assert {
        "findings.csv",
        "top_ops_by_type.csv",
        "step_breakdown_steps.csv",
        "copy_summary.csv",
        "op_statistic.csv",
        "aicpu.csv",
    } <= names
    header = (tmp_path / "csv" / "top_ops_by_type.csv").read_text().splitlines()[0]
    assert header.split(",") == TABLES["top_ops.by_type"]
    again = invoke(run_dir, "--csv", tmp_path / "csv")  # never replaces files silently
    assert again.exit_code == 2 and "already holds CSV files (--force" in again.output
    assert invoke(run_dir, "--csv", tmp_path / "csv", "--force").exit_code == 0


def test_cluster_view(cluster_dir: Path) -> None:
    out = invoke(cluster_dir, "--json")
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["profile"]["ranks"] == [0, 1]
    assert [r["rank"] for r in doc["communication"]["ranks"]] == [0, 1]
    assert {r["rank"] for r in doc["step_breakdown"]["steps"]} == {0, 1}
    slow = next(f for f in doc["findings"] if f["rule"] == "slow_rank")
    assert slow["status"] == "fired" and slow["rank"] == 1
    one = json.loads(invoke(cluster_dir, "--json", "--rank", "1").output)
    assert {r["rank"] for r in one["step_breakdown"]["steps"]} == {1}
    assert one["profile"]["focus_rank"] == 1
    assert "ranks (per step)" in invoke(cluster_dir).output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{missing}"], "no such file or directory"),
        (["{empty}"], "no profile here"),
        (["{run}", "--rank", "5"], "no rank 5"),
        (["{run}", "--json", "--csv", "x"], "cannot be combined"),
    ],
)
def test_errors_are_one_line_with_exit_code_2(
    args: list[str], message: str, run_dir: Path, tmp_path: Path
) -> None:
    paths = {"missing": tmp_path / "nope", "empty": tmp_path, "run": run_dir}
    out = invoke(*[a.format(**paths) for a in args])
    assert out.exit_code == 2
    lines = out.output.strip().splitlines()
    assert lines[-1].startswith("Error: ") and message in lines[-1]
    assert "Traceback" not in out.output
    assert issubclass(AnalyzeError, __import__("click").ClickException)


def test_api_accepts_a_path_a_profile_and_a_parent_folder(run_dir: Path, tmp_path: Path) -> None:
    from msprof_py.profile import load

    by_path = analyze(run_dir)
    by_profile = analyze(load(run_dir))
    assert [f.rule for f in by_path.findings] == [f.rule for f in by_profile.findings]
    assert by_path.to_json()["findings"] == by_profile.to_json()["findings"]
    parent = tmp_path / "out"
    parent.mkdir()
    (parent / "msprof_20260101_000000").symlink_to(run_dir, target_is_directory=True)
    assert analyze(parent).profile["ranks"] == [0]
    fired = by_path.fired()
    assert fired and all(f.status == "fired" for f in fired)
    assert by_path.finding("fusion_conv_bn_relu").status == "fired"
    with pytest.raises(KeyError):
        by_path.finding("no_such_rule")
