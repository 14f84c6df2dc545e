"""``msprof gate`` and ``msprof diff`` on recorded profiles (conftest.py describes the runs).

Every command invocation analyses its profiles again, so the checks that need no command
line run on the figures analysed once per session (``figures_of``).
"""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from rich.console import Console

from msprof_py.analyzers import analyze
from msprof_py.cli import cli
from msprof_py.gates.budget import load_budget, parse_budget
from msprof_py.gates.diff import NotComparable, diff, diff_figures
from msprof_py.gates.gate import GateUsageError, gate_figures
from msprof_py.gates.output import render_diff

RELATIVE = """\
[relative]
step_time = "2%"
peak_memory = "5%"
[relative.op_type_time]
"*" = "5%"
"""


def msprof(*args: object, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args], env=env, terminal_width=200)


def rendered(d) -> str:
    out = io.StringIO()
    render_diff(d, Console(file=out, width=200))
    return out.getvalue()


@pytest.fixture(scope="module")
def budget(runs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A first budget written from resnet_a's figures (+10%) by ``--init-budget``."""
    path = tmp_path_factory.mktemp("budget") / "perf-budget.toml"
    result = msprof("gate", runs["resnet_a"], "--init-budget", path)
    assert result.exit_code == 0, result.output
    assert "wrote" in result.output
    return path


@pytest.fixture(scope="module")
def relative(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("relative") / "relative.toml"
    path.write_text(RELATIVE, encoding="utf-8")
    return path


@pytest.mark.slow  # a third recording; the default run's determinism check is in tests/damaged
def test_the_same_sample_recorded_twice_gives_identical_figures(figures_of) -> None:
    a, b = figures_of("resnet_a"), figures_of("resnet_b")
    assert a == b
    figs = a[0]
    assert figs.steps == 2 and figs.deterministic and figs.device == "ascend910b"
    assert figs.step_time_ms > 0 and figs.launches_per_step > 0 and "Conv2D" in figs.op_type_time_ms
    # and their diff (two processes) shows no change
    d = diff_figures(a, b)
    assert not d.changed and all(f.delta == 0 for f in d.figures)
    assert "no change (every figure and op type is identical)" in rendered(d)
    assert "no op type changed" in rendered(d)


def test_a_budget_from_init_budget_passes_on_the_profiles_of_the_sample(
    figures_of, budget: Path
) -> None:
    text = budget.read_text(encoding="utf-8")
    assert "step_time_ms = " in text and "[absolute.op_type_time_ms]" in text
    for name in ("resnet_a", "resnet_b"):
        result = gate_figures(figures_of(name), load_budget(budget))
        assert result.passed, [c.describe() for c in result.failures]


def test_a_regression_fails_the_gate_with_exit_1_naming_the_metric(
    runs: dict[str, Path], budget: Path, tmp_path: Path
) -> None:
    junit, markdown = tmp_path / "gate.xml", tmp_path / "gate.md"
    result = msprof(
        "gate", runs["regressed"], "--budget", budget, "--junit", junit, "--markdown", markdown
    )
    assert result.exit_code == 1, result.output
    summary = result.output.strip().splitlines()[-1]
    assert summary.startswith("msprof gate: FAIL:")
    assert "copy_ratio = " in summary and "> limit" in summary
    # JUnit: one case per metric, the failures with their messages
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert set(cases) >= {"step_time_ms", "copy_ratio", "min_utilization", "launches_per_step"}
    assert int(suite.get("tests")) == len(cases) and int(suite.get("failures")) >= 1
    failure = cases["copy_ratio"].find("failure")
    assert failure is not None and failure.get("message").startswith("copy_ratio = ")
    assert cases["peak_memory_mb"].find("failure") is None
    # Markdown: a table, the failures first
    text = markdown.read_text(encoding="utf-8")
    assert text.startswith("## msprof gate: FAIL:")
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| `")]
    assert len(rows) == len(cases)
    verdicts = [row[-1].strip(" |") for row in rows]
    assert verdicts == sorted(verdicts) and verdicts[0] == "**FAIL**" and verdicts[-1] == "pass"
    assert "| `copy_ratio` |" in text


def test_relative_gate_fails_a_regression_and_writes_the_job_summary(
    runs: dict[str, Path], relative: Path, tmp_path: Path
) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("# earlier step\n", encoding="utf-8")
    result = msprof(
        "gate",
        runs["regressed"],
        "--budget",
        relative,
        "--baseline",
        runs["resnet_a"],
        env={"GITHUB_STEP_SUMMARY": str(summary)},
    )
    assert result.exit_code == 1, result.output
    last = result.output.strip().splitlines()[-1]
    assert "step_time = " in last and "vs baseline" in last
    assert "op_type_time.Sigmoid = " in last  # a new op type: its baseline is 0
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("# earlier step\n## msprof gate: FAIL:")
    assert "| `peak_memory` |" in text and "baseline" in text


def test_an_improvement_passes_the_relative_gate(figures_of, relative: Path) -> None:
    budget = load_budget(relative)
    result = gate_figures(figures_of("resnet_a"), budget, figures_of("regressed"))
    assert result.passed, [c.describe() for c in result.failures]
    step = next(c for c in result.checks if c.metric == "step_time")
    assert step.value < step.baseline


def test_relative_limits_need_a_baseline(runs: dict[str, Path], relative: Path) -> None:
    result = msprof("gate", runs["resnet_a"], "--budget", relative)
    assert result.exit_code == 2
    assert "relative limits ([relative] step_time, peak_memory" in result.output
    assert "--baseline DIR" in result.output


def test_a_broken_budget_is_exit_2_with_key_and_line(runs: dict[str, Path], tmp_path: Path) -> None:
    path = tmp_path / "budget.toml"
    path.write_text("[absolute]\nstep_time_ms = 3\nsyncs_per_stp = 2\n", encoding="utf-8")
    result = msprof("gate", runs["resnet_a"], "--budget", path)
    assert result.exit_code == 2
    assert "line 3: unknown key 'syncs_per_stp'" in result.output
    assert "did you mean 'syncs_per_step'" in result.output
    path.write_text("[absolute]\nstep_time_ms = \n", encoding="utf-8")
    result = msprof("gate", runs["resnet_a"], "--budget", path)
    assert result.exit_code == 2 and "line 2: not valid TOML" in result.output


def test_tool_errors_are_exit_2(runs: dict[str, Path], budget: Path, tmp_path: Path) -> None:
    result = msprof("gate", tmp_path / "missing", "--budget", budget)
    assert result.exit_code == 2 and "no such file or directory" in result.output
    result = msprof("gate", tmp_path, "--budget", budget)  # a folder without a profile
    assert result.exit_code == 2 and "Traceback" not in result.output
    result = msprof("gate", runs["resnet_a"])
    assert result.exit_code == 2 and "--budget FILE" in result.output
    result = msprof("gate", runs["resnet_a"], "--budget", tmp_path / "none.toml")
    assert result.exit_code == 2 and "no such budget file" in result.output
    result = msprof("gate", runs["resnet_a"], "--init-budget", budget)
    assert result.exit_code == 2 and "never overwritten" in result.output
    result = msprof("diff", runs["resnet_a"], tmp_path / "missing")
    assert result.exit_code == 2


def test_measured_host_time_warns_that_figures_are_noisy(
    runs: dict[str, Path], budget: Path
) -> None:
    result = msprof("gate", runs["measured"], "--budget", budget)
    assert result.exit_code == 0, result.output
    assert "--host-time measured" in result.stderr and "noisy" in result.stderr
    assert "noisy" not in result.stdout


def test_diff_shows_the_added_op_types_and_the_step_time_change(
    runs: dict[str, Path], figures_of
) -> None:
    result = msprof("diff", runs["resnet_a"], runs["regressed"], "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    ops = {o["op_type"]: o for o in doc["op_types"]}
    assert ops["Sigmoid"]["status"] == "added" and ops["Sigmoid"]["base_count"] == 0
    assert ops["MEMCPY_H2D"]["status"] == "added"
    assert ops["Conv2D"]["status"] == "same"
    # by hand: the diff of step time is the difference of the two profiles' figures
    base, new = figures_of("resnet_a")[0], figures_of("regressed")[0]
    step = doc["figures"][0]
    assert step["metric"] == "step_time_ms"
    assert (step["base"], step["new"]) == (base.step_time_ms, new.step_time_ms)
    assert step["delta"] == pytest.approx(new.step_time_ms - base.step_time_ms, abs=1e-12)
    assert step["delta"] > 0
    launches = next(f for f in doc["figures"] if f["metric"] == "launches_per_step")
    assert launches["delta"] == new.launches_per_step - base.launches_per_step > 0
    # the op types by impact: the largest change of device time first
    changes = [abs(o["delta_ms"]) for o in doc["op_types"]]
    assert changes == sorted(changes, reverse=True)
    text = rendered(diff_figures(figures_of("resnet_a"), figures_of("regressed")))
    assert "op types added (MEMCPY_H2D, Sigmoid" in text


def test_diff_and_gate_refuse_incomparable_profiles_unless_forced(
    runs: dict[str, Path], figures_of, relative: Path
) -> None:
    result = msprof("diff", runs["resnet_a"], runs["other_device"])
    assert result.exit_code == 2
    assert "not comparable" in result.output and "ascend910a" in result.output
    assert "--force" in result.output
    forced = diff_figures(figures_of("resnet_a"), figures_of("other_device"), force=True)
    assert "different device presets" in forced.warnings[0]
    # different step counts: all three steps analysed (the first, an outlier, kept) against two
    with pytest.raises(NotComparable, match="different step counts"):
        diff(analyze(runs["resnet_a"], warmup=0, keep_outliers=True), analyze(runs["resnet_b"]))
    budget = load_budget(relative)
    with pytest.raises(GateUsageError, match="the baseline is not comparable"):
        gate_figures(figures_of("resnet_a"), budget, figures_of("other_device"))
    assert gate_figures(figures_of("resnet_a"), budget, figures_of("other_device"), force=True)


def test_multi_rank_gate_checks_every_rank(runs: dict[str, Path], figures_of, budget: Path) -> None:
    result = msprof("gate", runs["cluster"], "--budget", budget, "--json")
    assert result.exit_code == 1, result.output
    checks = json.loads(result.stdout)["checks"]
    assert {c["rank"] for c in checks} == {0, 1}
    assert all(c["verdict"] == "pass" for c in checks if c["rank"] == 0)
    assert "copy_ratio" in {c["metric"] for c in checks if c["verdict"] == "FAIL"}
    assert all(c["rank"] == 1 for c in checks if c["verdict"] == "FAIL")
    # relative limits compare each rank with the same rank of the baseline
    relative = gate_figures(
        figures_of("cluster"),
        parse_budget('[relative]\nstep_time = "2%"\n'),
        figures_of("cluster_base"),
    )
    assert [(c.rank, c.passed) for c in relative.checks] == [(0, True), (1, False)]
    d = diff_figures(figures_of("cluster_base"), figures_of("cluster"))
    assert {o.rank for o in d.op_types if o.status != "same"} == {1}
    assert "rank" in rendered(d)
