"""PyTorch profiler (Kineto) traces load as profiles: a real CPU trace, a hand-written CUDA
trace with known answers, the CLI on them, ``.gz``, several ranks, damaged files."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from import_helpers import check_finite_shares
from kineto_fixture import BUSY, GPU_NAME, SGEMM, STEPS, TASKS, trace, write

import msprof_py
from msprof_py.analyzers import analyze
from msprof_py.cli import cli as main
from msprof_py.importers import kineto
from msprof_py.profile import ProfileError


@pytest.fixture(scope="module")
def cuda_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write(tmp_path_factory.mktemp("cuda") / "worker0.1.pt.trace.json")


# ---- a real trace ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """torch.profiler on a two-layer MLP: 4 loop steps, schedule wait 1, warmup 1, active 2."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, schedule

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(5, 8)
    sched = schedule(wait=1, warmup=1, active=2)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, schedule=sched) as prof:
        for _ in range(4):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
            prof.step()
    path = tmp_path_factory.mktemp("cpu") / "host_1.pt.trace.json"
    prof.export_chrome_trace(str(path))
    return path


def test_a_real_cpu_trace_loads_its_ops_shapes_and_steps(cpu_trace: Path) -> None:
    p = msprof_py.load(cpu_trace)
    assert p.meta[0]["source_format"] == "kineto"
    assert p.meta[0]["device"] == "cpu"
    assert p.meta[0]["status"] == "complete"
    # the schedule records the loop's steps 2 and 3 (0 waits, 1 warms up)
    assert list(p.steps["step"]) == [2, 3]
    assert set(p.steps["source"]) == {"torch.profiler"}
    assert (p.steps["end_ns"] > p.steps["start_ns"]).all()
    assert p.tasks.empty
    host = p.host_events
    ops = host[host["kind"] == "op"]
    for step in (2, 3):
        mine = ops[ops["step"] == step]
        linear = mine[mine["name"] == "aten::linear"]
        # two Linear layers, inputs (x or hidden, weight, bias)
        assert sorted(linear["input_shapes"]) == ["5,16;4,16;4", "5,8;16,8;16"]
        assert set(linear["input_dtypes"]) == {"float32;float32;float32"}
        assert (linear["sequence"] >= 0).all()
        assert (mine["name"] == "aten::relu").sum() == 1
        names = set(host.loc[host["step"] == step, "name"])
        assert f"ProfilerStep#{step}" in names
        assert any(n.startswith("Optimizer.step#SGD") for n in names)
    # every op lies inside the step it is given
    s = p.steps.set_index("step")
    for r in ops.itertuples():
        assert s.loc[r.step, "start_ns"] <= r.start_ns < s.loc[r.step, "end_ns"]
    assert p.memory.empty  # a CPU-only trace has no device memory


def test_a_real_cpu_trace_analyses_with_the_device_rules_skipped(cpu_trace: Path) -> None:
    a = analyze(cpu_trace)
    assert a.profile["steps_analysed"] == [2, 3]
    assert a.profile["device"] == "cpu"
    assert a.finding("host_bound_dispatch").status == "skipped"
    assert a.finding("memory_near_capacity").status == "skipped"
    assert not a.fired()


# ---- a CUDA trace with known answers ------------------------------------------------------


def test_cuda_trace_tasks_timing_kinds_and_links(cuda_trace: Path) -> None:
    p = msprof_py.load(cuda_trace)
    assert p.ranks == [1]
    t = p.tasks.sort_values("task_id")
    assert list(t["task_id"]) == list(range(len(TASKS)))
    got = list(
        t[
            [
                "kind",
                "name",
                "op_type",
                "stream_id",
                "launch_ns",
                "start_ns",
                "end_ns",
                "wait_ns",
                "step",
                "task_type",
            ]
        ].itertuples(index=False, name=None)
    )
    assert got == TASKS
    host = p.host_events.set_index("event_id")
    for task in t.itertuples():
        op = host.loc[task.host_op_id]
        assert op["kind"] == "op" and op["name"] == task.name
        launch = host[(host["kind"] == "launch") & (host["task_id"] == task.task_id)]
        assert len(launch) == 1  # the runtime call that launched it
        assert launch["parent_id"].iloc[0] == task.host_op_id
        assert launch["start_ns"].iloc[0] == task.launch_ns
        assert launch["stream_id"].iloc[0] == task.stream_id
    copy = t[t["kind"] == "memcpy"].iloc[0]
    assert (copy["copy_kind"], bool(copy["pinned"]), copy["bytes"]) == ("HOST_TO_DEVICE", True, 128)
    assert copy["input_shapes"] == "4,8;4,8"  # the Scalar (non_blocking) is no tensor: left out
    mm = t[t["name"] == "aten::mm"]
    assert set(mm["input_shapes"]) == {"4,8;8,16"} and set(mm["input_dtypes"]) == {
        "float32;float32"
    }
    assert set(mm["block_dim"]) == {6}  # grid 2 x 3 x 1
    nccl = t[t["kind"] == "collective"].iloc[0]
    assert (nccl["collective"], nccl["algorithm"], nccl["world_size"]) == ("allreduce", "ring", 2)
    assert nccl["bytes"] == 1024 * 4  # In msg nelems x float32, from the launching op


def test_cuda_trace_host_events_steps_memory_and_meta(cuda_trace: Path) -> None:
    p = msprof_py.load(cuda_trace)
    assert list(p.steps[["step", "start_ns", "end_ns"]].itertuples(index=False, name=None)) == STEPS
    host = p.host_events
    sync = host[host["kind"] == "sync"]
    assert list(sync["name"]) == ["cudaStreamSynchronize"]
    assert sync["parent_id"].iloc[0] == -1  # outside any op
    assert (sync["start_ns"].iloc[0], sync["end_ns"].iloc[0], sync["step"].iloc[0]) == (
        180_000,
        195_000,
        6,
    )
    assert (host["kind"] == "launch").sum() == 5
    mm = host[(host["kind"] == "op") & (host["name"] == "aten::mm")]
    assert list(mm["sequence"]) == [3, 4] and list(mm["step"]) == [5, 6]
    mem = p.memory
    assert list(mem["action"]) == ["malloc", "free"]  # the host allocator's event left out
    assert list(mem["time_ns"]) == [31_000, 160_000]
    assert list(mem["size"]) == [256, 256]
    assert list(mem["allocated"]) == [1280, 1024]
    assert list(mem["reserved"]) == [2_097_152, 2_097_152]
    assert list(mem["tag"]) == ["aten::mm", ""]  # the free runs outside any op
    assert list(mem["step"]) == [5, 6]
    meta = p.meta[1]
    assert meta["device"] == GPU_NAME and meta["world_size"] == 2 and meta["rank"] == 1
    assert meta["source_format"] == "kineto" and meta["host_memory_events"] == 1


def test_cuda_trace_analysis_counts_kernels_as_device_busy(cuda_trace: Path) -> None:
    a = analyze(cuda_trace)
    util = a.compute_density["utilisation"]
    assert dict(zip(util["step"], util["device_busy_ns"], strict=True)) == BUSY
    # no device spec for a GPU: the rules that compare with peaks say why they cannot run
    fusion = a.finding("fusion_matmul_epilogue")
    assert fusion.status == "skipped" and GPU_NAME in fusion.message
    assert a.finding("slow_rank").status == "skipped"
    # memory recorded, but a GPU has no device spec: what is unknown is its capacity
    low = a.finding("low_utilisation")
    assert low.status == "skipped"
    assert "memory capacity is unknown" in low.message and "not a preset" in low.message
    assert "was not recorded" not in low.message
    # the document --json writes: no NaN/inf, every share in [0, 1]
    assert check_finite_shares(a.to_json()) > 10


# ---- the CLI --------------------------------------------------------------------------------


def test_msprof_analyze_and_report_on_a_trace(cuda_trace: Path, tmp_path: Path) -> None:
    run = CliRunner().invoke(main, ["analyze", str(cuda_trace)], terminal_width=200)
    assert run.exit_code == 0, run.output
    assert "steps 5, 6" in run.output and GPU_NAME in run.output
    skipped = [line for line in run.output.splitlines() if "SKIPPED" in line]
    assert any(line.strip().startswith("fusion_matmul_epilogue:") for line in skipped)
    out = tmp_path / "x.html"
    report = CliRunner().invoke(main, ["report", str(cuda_trace), "-o", str(out)])
    assert report.exit_code == 0, report.output
    assert out.stat().st_size > 10_000 and GPU_NAME in out.read_text()


def test_msprof_report_without_o_writes_next_to_the_trace(tmp_path: Path) -> None:
    path = write(tmp_path / "w.pt.trace.json")
    report = CliRunner().invoke(main, ["report", str(path)])
    assert report.exit_code == 0, report.output
    assert (tmp_path / "report.html").is_file() and path.is_file()


def test_msprof_gate_and_diff_on_traces(cuda_trace: Path, tmp_path: Path) -> None:
    budget = tmp_path / "budget.toml"
    init = CliRunner().invoke(main, ["gate", str(cuda_trace), "--init-budget", str(budget)])
    assert init.exit_code == 0, init.output
    gate = CliRunner().invoke(main, ["gate", str(cuda_trace), "--budget", str(budget)])
    assert gate.exit_code == 0, gate.output
    # an imported profile's times are measured: no --host-time advice that cannot apply
    assert "--host-time" not in gate.stderr
    assert "imported kineto profile" in gate.stderr and "measured" in gate.stderr
    slower = trace()
    for e in slower["traceEvents"]:
        if e.get("name") == SGEMM:
            e["dur"] *= 2
    new = write(tmp_path / "new.pt.trace.json", slower)
    diff = CliRunner().invoke(main, ["diff", str(cuda_trace), str(new), "--json"])
    assert diff.exit_code == 0, diff.output
    assert "--host-time measured" not in diff.stderr
    assert "imported kineto profile" in diff.stderr and "measured times" in diff.stderr
    doc = json.loads(diff.stdout)
    assert "ampere_sgemm" in json.dumps(doc)
    over = CliRunner().invoke(main, ["gate", str(new), "--budget", str(budget)])
    assert over.exit_code == 1, over.output  # the sgemm kernels take twice as long


# ---- gzip, folders, ranks -------------------------------------------------------------------


def test_a_gz_trace_and_a_folder_holding_one_load_the_same(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    plain = msprof_py.load(write(tmp_path / "a" / "w.pt.trace.json"))
    packed = msprof_py.load(write(tmp_path / "b.pt.trace.json.gz"))
    folder = msprof_py.load(tmp_path / "a")
    for p in (packed, folder):
        assert p.meta[1]["source_format"] == "kineto"
        for name in ("tasks", "host_events", "memory", "steps"):
            assert p.tables[name].equals(plain.tables[name]), name


def test_a_folder_of_one_trace_per_rank_is_a_cluster(tmp_path: Path) -> None:
    write(tmp_path / "r0.pt.trace.json", trace(rank=0))
    write(tmp_path / "r1.pt.trace.json.gz", trace(rank=1, shift_us=50))
    p = msprof_py.load(tmp_path)
    assert p.ranks == [0, 1]
    first = p.tasks[p.tasks["rank"] == 0]["start_ns"].to_numpy()
    second = p.tasks[p.tasks["rank"] == 1]["start_ns"].to_numpy()
    assert list(second - first) == [50_000] * len(TASKS)  # one clock for both ranks
    a = analyze(tmp_path)
    assert (
        a.finding("slow_rank").status != "skipped"
        or "one rank" not in a.finding("slow_rank").message
    )


def test_traces_of_one_rank_in_a_folder_are_a_clear_error(tmp_path: Path) -> None:
    write(tmp_path / "a.pt.trace.json", trace(rank=0))
    write(tmp_path / "b.pt.trace.json", trace(rank=0))
    with pytest.raises(ProfileError, match=r"a\.pt\.trace\.json, b\.pt\.trace\.json"):
        msprof_py.load(tmp_path)


def test_a_json_file_is_recognised_by_its_header_not_only_its_name(tmp_path: Path) -> None:
    named = write(tmp_path / "trace.json")
    assert kineto.detect(named)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"traceEvents": []}))
    assert not kineto.detect(other)


# ---- damaged files --------------------------------------------------------------------------


def _damaged(tmp_path: Path) -> dict[str, Path]:
    text = json.dumps(trace()).encode()
    cases = {
        "not json": (tmp_path / "a.pt.trace.json", b"this is not json"),
        "cut short": (tmp_path / "b.pt.trace.json", text[: len(text) // 2]),
        "truncated gz": (tmp_path / "c.pt.trace.json.gz", gzip.compress(text)[:200]),
        "no traceEvents": (tmp_path / "d.pt.trace.json", b'{"schemaVersion": 1}'),
        "a list": (tmp_path / "e.pt.trace.json", b"[1, 2]"),
        "binary": (tmp_path / "f.pt.trace.json", b"\xff\xfe\x00garbage"),
    }
    for path, data in cases.values():
        path.write_bytes(data)
    return {k: v[0] for k, v in cases.items()}


def test_damaged_traces_are_one_line_errors_naming_the_file(tmp_path: Path) -> None:
    for case, path in _damaged(tmp_path).items():
        with pytest.raises(ProfileError) as err:
            msprof_py.load(path)
        message = str(err.value)
        assert str(path) in message and "\n" not in message, case
        run = CliRunner().invoke(main, ["analyze", str(path)])
        assert run.exit_code != 0, case
        assert "Traceback" not in run.output and path.name in run.output, case
        assert len(run.output.strip().splitlines()) == 1, (case, run.output)


def test_odd_events_are_skipped_not_fatal(tmp_path: Path) -> None:
    doc = trace()
    doc["traceEvents"] += [
        "not an event",
        {"ph": "X", "cat": "cpu_op", "name": "aten::bad", "ts": "soon", "dur": 1},
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 1190, "args": "odd"},
    ]
    p = msprof_py.load(write(tmp_path / "odd.pt.trace.json", doc))
    assert "aten::bad" not in set(p.host_events["name"])
    assert len(p.tasks) == len(TASKS) + 1
    assert any("without a numeric ts" in w for w in p.warnings)


def test_the_importer_loads_without_torch(cuda_trace: Path) -> None:
    code = (
        "import sys, msprof_py; p = msprof_py.load(sys.argv[1]); "
        "print(len(p.tasks), 'torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(cuda_trace)], capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == [str(len(TASKS)), "False"]
