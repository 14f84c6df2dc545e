"""msprof end to end: launching, exit codes, crash/signal/OOM safety, the step window."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import msprof_py

MSPROF = [sys.executable, "-m", "msprof_py.cli_entry"]

TRAIN = """
import sys, torch
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
model = model.to("npu")
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range({steps}):
    x = torch.randn(8, 16).to("npu")
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print("loss", loss.item())
"""


def _script(tmp_path: Path, body: str, name: str = "train.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def _msprof(*args: str, cwd: Path, timeout: int = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*MSPROF, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def _run_folder(output: Path) -> Path:
    (folder,) = sorted(output.glob("msprof_*"))
    return folder


def test_profiles_a_training_script(tmp_path: Path) -> None:
    script = _script(tmp_path, TRAIN.format(steps=3))
    result = _msprof("--output=out", "python", str(script), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "loss" in result.stdout
    assert "profile written to" in result.stderr and "top ops" in result.stderr
    folder = _run_folder(tmp_path / "out")
    assert json.loads((folder / "trace.json").read_text())["traceEvents"]
    (rank_dir,) = folder.glob("*_ascend_pt")
    assert (rank_dir / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv").is_file()
    assert list(rank_dir.glob("PROF_*/mindstudio_profiler_output/op_summary_*.csv"))
    profile = msprof_py.load(folder)
    assert profile.ranks == [0]
    meta = profile.meta[0]
    assert meta["status"] == "completed" and meta["exit_code"] == 0
    assert meta["device"] == "ascend910b" and meta["numerics"] == "cpu"
    assert list(profile.steps["step"]) == [0, 1, 2, 3]  # 3 optimizer steps + the tail
    assert {"MatMul", "MEMCPY_H2D"} <= set(profile.tasks["op_type"])
    ops = profile.host_events[profile.host_events["kind"] == "op"]
    linked = profile.tasks[profile.tasks["host_op_id"] >= 0]
    assert set(linked["host_op_id"]) <= set(ops["event_id"])  # every task knows its host op
    assert (ops["module"].str.contains("Sequential/Linear")).any()


@pytest.mark.slow  # two runs; --application parsing has unit tests
def test_application_option_and_second_run_gets_a_new_folder(tmp_path: Path) -> None:
    script = _script(tmp_path, TRAIN.format(steps=1))
    for _ in range(2):
        result = _msprof(f"--application=python {script}", "--output=out", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
    assert len(list((tmp_path / "out").glob("msprof_*"))) == 2


@pytest.mark.parametrize(
    ("body", "code", "status"),
    [
        # slow: one exit path runs by default (the exit handlers are shared)
        pytest.param(
            "import sys\n" + TRAIN.format(steps=2) + "sys.exit(3)\n",
            3,
            "completed",
            marks=pytest.mark.slow,
        ),
        (TRAIN.format(steps=2) + "raise ValueError('boom')\n", 1, "exception"),
        pytest.param(
            TRAIN.format(steps=2) + "torch.empty(100 * 2**30, dtype=torch.uint8, device='npu')\n",
            1,
            "oom",
            marks=pytest.mark.slow,
        ),
    ],
    ids=["sys-exit-3", "exception", "oom"],
)
def test_every_exit_keeps_the_profile(tmp_path: Path, body: str, code: int, status: str) -> None:
    script = _script(tmp_path, body)
    result = _msprof("--output=out", "python", str(script), cwd=tmp_path)
    assert result.returncode == code, result.stderr
    profile = msprof_py.load(_run_folder(tmp_path / "out"))
    assert profile.meta[0]["status"] == status
    assert profile.meta[0]["exit_code"] == code
    assert (profile.tasks["op_type"] == "MatMul").sum() > 0
    assert list(profile.steps["step"][:2]) == [0, 1]


def _training_until_ready(tmp_path: Path, new_session: bool = False) -> subprocess.Popen:
    """A long training run under msprof, started and past its third step (it printed
    ``ready``); fails if it ends or stays silent first."""
    script = _script(
        tmp_path,
        TRAIN.format(steps=1_000_000).replace(
            "optimizer.step()", "optimizer.step()\n    if step == 2: print('ready', flush=True)"
        ),
    )
    child = subprocess.Popen(
        [*MSPROF, "--output=out", "python", str(script)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=new_session,
        # as from a terminal's foreground: a shell's background job (``make test &``) starts
        # its commands with SIGINT ignored, which the run (like any Python) would then keep
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert child.stdout is not None
    deadline = time.time() + 120
    while "ready" not in (line := child.stdout.readline()):
        assert line, f"the run ended before its third step: {child.stderr and child.stderr.read()}"
        assert time.time() < deadline
    return child


def test_sigint_keeps_the_profile(tmp_path: Path) -> None:
    child = _training_until_ready(tmp_path, new_session=True)
    time.sleep(0.5)
    # Ctrl-C reaches the whole process group; like a user, press it again if the first one
    # landed where Python swallows it (inside a __del__, as CPython does everywhere)
    for _ in range(5):
        os.killpg(child.pid, signal.SIGINT)
        try:
            child.communicate(timeout=20)
            break
        except subprocess.TimeoutExpired:
            continue
    assert child.returncode == 130
    profile = msprof_py.load(_run_folder(tmp_path / "out"))
    assert profile.meta[0]["status"] == "interrupted"
    assert len(profile.steps) >= 3


def test_sigint_sent_to_msprof_alone_is_forwarded_like_ctrl_c(tmp_path: Path) -> None:
    # kill -INT <msprof>, timeout -s INT, a supervisor: only msprof gets it; it passes it on
    child = _training_until_ready(tmp_path, new_session=True)
    child.send_signal(signal.SIGINT)
    child.communicate(timeout=60)
    assert child.returncode == 130
    profile = msprof_py.load(_run_folder(tmp_path / "out"))
    assert profile.meta[0]["status"] == "interrupted"
    assert len(profile.steps) >= 3


def test_sigterm_keeps_the_profile(tmp_path: Path) -> None:
    child = _training_until_ready(tmp_path)
    child.send_signal(signal.SIGTERM)  # msprof forwards it to the script
    _, err = child.communicate(timeout=120)
    assert child.returncode == 128 + signal.SIGTERM, err[-3000:]
    profile = msprof_py.load(_run_folder(tmp_path / "out"))
    assert profile.meta[0]["status"] == "terminated"
    assert len(profile.steps) >= 3


def test_iteration_window(tmp_path: Path) -> None:
    script = _script(tmp_path, TRAIN.format(steps=6))
    result = _msprof(
        "--warmup=2", "--iteration=2", "--output=out", "python", str(script), cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    profile = msprof_py.load(_run_folder(tmp_path / "out"))
    assert list(profile.steps["step"]) == [2, 3]
    assert set(profile.tasks["step"]) == {2, 3}
    assert "loss" in result.stdout  # the script ran to its end


def test_deterministic_runs_give_identical_tables(tmp_path: Path) -> None:
    script = _script(tmp_path, TRAIN.format(steps=2))
    tables, raw, exported = [], [], []
    for out in ("a", "b"):
        result = _msprof("--deterministic", f"--output={out}", "python", str(script), cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        run = _run_folder(tmp_path / out)
        profile = msprof_py.load(run)
        tables.append((profile.tasks, profile.host_events))
        chunks = sorted(run.rglob("msprof_raw/*.parquet"))
        raw.append({p.name: p.read_bytes() for p in chunks})
        outputs = sorted(next(run.rglob("ASCEND_PROFILER_OUTPUT")).iterdir())
        exported.append({p.name: p.read_bytes() for p in outputs})
    assert tables[0][0].equals(tables[1][0])
    assert tables[0][1].equals(tables[1][1])  # logical thread ids, not OS ones
    assert set(tables[0][1]["thread"]) <= {0, 1, 2, 3}
    assert raw[0] == raw[1]  # the raw tables are byte-identical
    assert "trace_view.json" in exported[0]
    assert exported[0] == exported[1]  # and so are the exports (logical pid, fixed clock)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--output=out", "python", "missing.py"], "script not found: missing.py"),
        (["--device=nosuch", "--output=out", "python", "x.py"], "unknown device preset"),
        (["--type=db", "--output=out", "python", "x.py"], "--type db is not supported yet"),
        (["--deterministic", "--host-time=measured", "python", "x.py"], "--deterministic"),
        (["--iteration=0", "python", "x.py"], "--iteration"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(
    tmp_path: Path, args: list[str], message: str
) -> None:
    result = _msprof(*args, cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and lines[0].startswith("msprof: error:")
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_script_marked_steps_and_annotations(tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        """
        import torch, msprof_py
        x = torch.randn(64, 64, device="npu")
        for i in range(3):
            with msprof_py.annotate("forward"):
                y = x @ x
            msprof_py.step()
        """,
    )
    result = _msprof("--output=out", "python", str(script), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    profile = msprof_py.load(_run_folder(tmp_path / "out"))
    steps = profile.steps
    assert list(steps[steps["source"] == "msprof_py.step"]["step"]) == [0, 1, 2]
    annotations = profile.host_events[profile.host_events["kind"] == "annotation"]
    assert list(annotations["name"]) == ["forward"] * 3
    assert json.loads(
        (_run_folder(tmp_path / "out").glob("*/msprof_raw/meta.json").__next__()).read_text()
    )["command"].endswith("train.py")


def test_torchrun_records_every_rank_and_analysis_finds_the_straggler(tmp_path: Path) -> None:
    sample = Path(__file__).resolve().parents[2] / "sample_runs" / "train_ddp.py"
    result = _msprof(
        "--output=out",
        "torchrun",
        "--nproc-per-node=2",
        str(sample),
        "--steps=4",
        "--slow-rank=1",
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    run = _run_folder(tmp_path / "out")
    profile = msprof_py.load(run)
    assert profile.ranks == [0, 1]
    assert {m["world_size"] for m in profile.meta.values()} == {2}
    hccl = profile.tasks[profile.tasks["task_type"] == "HCCL"]
    by_rank = [hccl[hccl["rank"] == r].reset_index(drop=True) for r in (0, 1)]
    fast, slow = by_rank
    assert len(fast) == len(slow) > 0
    # every collective ends together on both ranks and moves its data in the same time; the
    # fast rank begins when it is ready and waits for the straggler inside the task
    assert fast["end_ns"].equals(slow["end_ns"])
    transit = [b["end_ns"] - b["start_ns"] - b["notify_wait_ns"] for b in by_rank]
    assert transit[0].equals(transit[1])
    assert (fast["start_ns"] <= slow["start_ns"]).all()
    assert (slow["notify_wait_ns"] == 0).all()
    trained = fast["step"] >= 1  # the straggler's extra work runs in every training step
    assert (fast.loc[trained & (fast["collective"] == "allreduce"), "notify_wait_ns"] > 0).any()

    analysis = msprof_py.analyze(run)
    table = analysis.communication["ranks"].set_index("rank")
    assert table.loc[0, "wait_ns"] > 0 and table.loc[1, "wait_ns"] == 0
    # synchronous data parallel: both ranks' steps take the straggler's time (within 2%) once
    # the fast rank's host, which runs ahead until it first waits for its device, has settled
    # (steps are cut on the host): the last step of each rank
    steps = profile.steps[profile.steps["source"] == "optimizer"]
    last = [steps[steps["rank"] == r].iloc[-1] for r in (0, 1)]
    durations = [row["end_ns"] - row["start_ns"] for row in last]
    assert max(durations) / min(durations) < 1.02
    finding = analysis.finding("slow_rank")
    assert finding.status == "fired" and finding.rank == 1
    assert analysis.communication["slow_rank"]["cause"] == "compute"
    assert "Rank 1" in finding.message

    # communication.json reports the wait as HCCL's Wait Time, on the fast rank only
    waits = {}
    for info in run.glob("*_ascend_pt/profiler_info_*.json"):
        rank = int(info.stem.rsplit("_", 1)[1])
        doc = json.loads(
            (info.parent / "ASCEND_PROFILER_OUTPUT" / "communication.json").read_text()
        )
        times = [v["collective"]["Total Op Info"]["Communication Time Info"] for v in doc.values()]
        waits[rank] = sum(t["Wait Time(ms)"] for t in times)
        for t in times:
            assert t["Elapse Time(ms)"] == pytest.approx(t["Transit Time(ms)"] + t["Wait Time(ms)"])
    assert waits[0] == pytest.approx(fast["notify_wait_ns"].sum() / 1e6) and waits[0] > 0
    assert waits[1] == 0


@pytest.mark.slow  # the analysis's backward pairing tests use the column
def test_backward_ops_carry_their_forward_sequence_number(tmp_path: Path) -> None:
    script = _script(tmp_path, TRAIN.format(steps=1))
    result = _msprof("--output=out", "python", str(script), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    ops = msprof_py.load(_run_folder(tmp_path / "out")).host_events
    ops = ops[ops["kind"] == "op"]
    forward = ops[ops["name"] == "aten::addmm"]
    backward_threads = set(ops["thread"]) - set(forward["thread"])
    assert backward_threads  # backward ran on the autograd engine's device thread
    backward = ops[ops["thread"].isin(backward_threads) & (ops["sequence"] >= 0)]
    assert set(forward["sequence"]) & set(backward["sequence"])  # fwd/bwd pairs line up
