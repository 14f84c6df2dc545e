"""What an ``msprof`` run writes and says: the export switches and their sizes, the terminal
summary, a run that never used the npu, a run cut short by SIGKILL. Five small runs, recorded
once, side by side."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import msprof_py
from msprof_py.collectors.run import ProfileRun, RunOptions
from msprof_py.exporters.sizes import json_size

MSPROF = [sys.executable, "-m", "msprof_py.cli_entry"]

TRAIN = """
import os, signal, torch
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
model = model{device}
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(6):
    x = torch.randn(8, 16){device}
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    {kill}
print("loss", loss.item())
"""
NPU = TRAIN.format(device='.to("npu")', kill="")
RUNS = {
    "full": (NPU, ["--no-report"]),
    "small": (
        NPU,
        ["--export=chrome", "--export-steps=2-3", "--export-gzip=on", "--no-report"],
    ),
    "none": (NPU, ["--export=none", "--no-report"]),
    "cpu": (TRAIN.format(device="", kill=""), ["--no-report"]),
    "killed": (
        TRAIN.format(
            device='.to("npu")', kill="if step == 3: os.kill(os.getpid(), signal.SIGKILL)"
        ),
        ["--no-report"],
    ),
}


class Run:
    def __init__(self, folder: Path, result: subprocess.CompletedProcess[str]) -> None:
        self.folder = folder
        self.returncode = result.returncode
        self.stderr = result.stderr

    @property
    def run(self) -> Path:
        (run,) = sorted((self.folder / "out").glob("msprof_*"))
        return run


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    procs = {}
    for name, (body, args) in RUNS.items():
        folder = tmp_path_factory.mktemp(name)
        (folder / "train.py").write_text(textwrap.dedent(body))
        procs[name] = (
            folder,
            subprocess.Popen(
                [*MSPROF, "--output=out", *args, "python", "train.py"],
                cwd=folder,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            ),
        )
    out = {}
    for name, (folder, proc) in procs.items():
        stdout, stderr = proc.communicate(timeout=600)
        out[name] = Run(
            folder, subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
        )
    return out


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _task_events(trace: dict) -> list[dict]:
    device_pids = {
        e["pid"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["args"].get("name") == "Device"
    }
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] in device_pids]


def test_export_switches_choose_what_is_written(runs: dict[str, Run]) -> None:
    full, small, none = runs["full"].run, runs["small"].run, runs["none"].run
    for r in (full, small, none):
        assert sorted(msprof_py.load(r).steps["step"]) == list(range(7))  # the raw profile: all
    (full_rank,) = full.glob("*_ascend_pt")
    assert (full / "trace.json").is_file() and (full_rank / "ASCEND_PROFILER_OUTPUT").is_dir()
    assert sorted(p.name for p in small.iterdir() if p.is_file()) == ["trace.json.gz"]
    for r in (small, none):
        (rank,) = r.glob("*_ascend_pt")
        assert sorted(p.name for p in rank.iterdir()) == ["msprof_raw"]  # no Ascend export
    assert sorted(p.name for p in none.iterdir() if p.is_file()) == []
    # sizes before/after: everything vs the Chrome trace of 2 of the 7 steps, gzipped
    sizes = {name: _size(runs[name].run) for name in ("full", "small", "none")}
    print("run folder sizes:", sizes)
    assert sizes["none"] < sizes["small"] < sizes["full"]
    full_trace = json.loads((full / "trace.json").read_bytes())
    small_trace = json.loads(gzip.decompress((small / "trace.json.gz").read_bytes()))
    profile = msprof_py.load(full)
    assert len(_task_events(full_trace)) == len(profile.tasks)
    window = profile.tasks["step"].isin([2, 3])
    assert len(_task_events(small_trace)) == int(window.sum())
    assert {e["args"]["step"] for e in _task_events(small_trace)} == {2, 3}
    plain, packed = (full / "trace.json").stat().st_size, (small / "trace.json.gz").stat().st_size
    # 2 of 7 steps, and step 0 (the first, the largest) left out: well under half uncompressed
    assert json_size(small / "trace.json.gz") < plain / 2
    assert packed < json_size(small / "trace.json.gz") / 4  # gzip: JSON shrinks severalfold
    assert (
        "timeline: out/msprof_" in runs["small"].stderr and "trace.json.gz" in runs["small"].stderr
    )
    assert "_ascend_pt/ (msprof-analyze reads it)" not in runs["small"].stderr


def test_a_json_trace_over_the_limit_is_a_warning_with_a_window_that_fits(
    runs: dict[str, Run], capsys: pytest.CaptureFixture[str]
) -> None:
    full = runs["full"].run
    trace = full / "trace.json"
    (view,) = full.glob("*/ASCEND_PROFILER_OUTPUT/trace_view.json")
    limit = min(trace.stat().st_size, view.stat().st_size) // 2
    run = ProfileRun(RunOptions(output=full.parent, export_warn_bytes=limit), ["python", "x.py"])
    run.folder, run.rank_dirs, run.trace = full, sorted(full.glob("*_ascend_pt")), trace
    run._warn_sizes()
    err = capsys.readouterr().err.splitlines()
    (line,) = [e for e in err if "trace.json is" in e]
    # 7 steps in the file, at most half its size allowed: the steps that fit, rounded down
    keep = 7 * limit // trace.stat().st_size
    assert 1 <= keep <= 3
    assert line.startswith("msprof: warning: trace.json is ")
    assert "(7 steps)" in line and f"--export-steps=0-{keep - 1} ({keep} steps)" in line
    assert line.endswith("--export=ascend leaves it out")
    (line,) = [
        e
        for e in err
        if f"{view.parent.parent.name}/ASCEND_PROFILER_OUTPUT/trace_view.json is" in e
    ]
    assert line.endswith("--export=chrome leaves it out")
    run.options = RunOptions(output=full.parent)  # the default limit: 500 MiB
    run._warn_sizes()
    assert capsys.readouterr().err == ""


def test_the_summary_reads_as_words_and_lists_the_top_findings(runs: dict[str, Run]) -> None:
    result = runs["full"]
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    analysis = msprof_py.analyze(result.run)
    assert "  1 rank (rank 0)   completed   exit code 0" in lines
    steps = analysis.profile["steps_analysed"]
    (line,) = [x for x in lines if "steps analysed" in x]
    assert line.startswith(
        f"  {len(steps)} steps analysed (step 0 left out as warm-up)   mean step "
    )
    fired = analysis.fired()
    assert fired, "the toy run is small enough to be host-bound"
    assert f"  findings: {len(fired)} fired" in "\n".join(lines)
    shown = [x for x in lines if x.startswith("    ") and ": " in x and not x.startswith("    │")]
    assert [x.split(":")[0].strip() for x in shown] == [f.rule for f in fired[:5]]
    for f, x in zip(fired, shown, strict=False):
        if f.estimated_gain_us:  # the gain on the same line: never wrapped in a pipe
            assert f"est. gain {f.estimated_gain_us:,.1f} us/step" in x
    assert any(len(x) > 100 for x in shown)  # wider than a terminal, yet one line
    for text in ("{0:", "[0]", "'completed'"):
        assert text not in result.stderr  # no Python reprs


def test_a_run_that_never_used_the_npu_says_so_in_one_line(runs: dict[str, Run]) -> None:
    result = runs["cpu"]
    assert result.returncode == 0, result.stderr
    said = [x for x in result.stderr.splitlines() if "never used the npu" in x]
    assert len(said) == 1
    assert "mean step" not in result.stderr and "findings" not in result.stderr


@pytest.mark.filterwarnings("ignore::msprof_py.profile.ProfileWarning")
def test_a_run_cut_short_by_sigkill_says_partial_killed(
    runs: dict[str, Run], tmp_path: Path
) -> None:
    """The summary line, the profile, the analysis and the HTML report's banner."""
    result = runs["killed"]
    assert result.returncode == 128 + 9
    assert "  1 rank (rank 0)   partial: killed   exit code 137" in result.stderr.splitlines()
    assert result.stderr.count("the recorder never finished (status killed)") == 1  # once
    profile = msprof_py.load(result.run)
    assert profile.partial and profile.meta[0]["status"] == "killed"
    analysis = msprof_py.analyze(result.run)
    assert analysis.profile["partial"] and analysis.profile["status"] == {0: "killed"}
    from msprof_py.report.build import write_report

    page = write_report(profile, tmp_path / "killed.html", analysis).read_text()
    banner = page[page.index('id="partial-banner"') :]
    assert banner[: banner.index("</p>")].startswith(
        'id="partial-banner"><b>Partial profile (rank 0: killed)'
    )


def test_repr_is_a_short_summary(runs: dict[str, Run]) -> None:
    profile = msprof_py.load(runs["full"].run)
    text = repr(profile)
    assert len(text) < 200 and "\n" not in text
    assert text.startswith(
        f"<Profile {str(runs['full'].run)!r}: rank 0, {len(profile.tasks):,} tasks"
    )
    assert text.endswith(", completed>")
    analysis = msprof_py.analyze(profile)
    text = repr(analysis)
    fired = analysis.fired()
    assert len(text) < 400 and "\n" not in text
    assert f"{len(fired)} findings fired ({', '.join(f.rule for f in fired[:5])}" in text
    assert f"{len(analysis.profile['steps_analysed'])} steps analysed" in text


def test_memory_findings_know_memory_was_recorded(runs: dict[str, Run]) -> None:
    meta = msprof_py.load(runs["full"].run).meta[0]
    assert meta["record_memory"] is True and meta["record_tasks"] is True
    finding = msprof_py.analyze(runs["full"].run).finding("memory_near_capacity")
    assert "was off" not in finding.message
