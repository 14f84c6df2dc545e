"""Every hand-made damaged-input case of issue 21 as a named regression test."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from msprof_py.cli import cli
from msprof_py.profile import ProfileError, load
from msprof_py.profile.meta import sealed
from msprof_py.profile.schema import default_row

RAW = "msprof_raw"


def _part(run: Path, table: str = "tasks") -> Path:
    return run / RAW / f"{table}-00000.parquet"


def _meta(run: Path) -> Path:
    return run / RAW / "meta.json"


def _error(run: Path, *words: str) -> str:
    with pytest.raises(ProfileError) as caught:
        load(run)
    message = str(caught.value)
    assert "\n" not in message
    for word in words:
        assert word in message, message
    return message


def _cli(*args: str):
    return CliRunner().invoke(cli, [str(a) for a in args])


def _clean_exit_2(result) -> None:
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit)
    errors = [x for x in result.stderr.splitlines() if not x.startswith("msprof: warning:")]
    assert len(errors) == 1 and errors[0].startswith("Error: "), result.stderr


# ---- Parquet chunks ----------------------------------------------------------------------


def test_chunk_truncated_to_half(copy_of) -> None:
    run = copy_of()
    data = _part(run).read_bytes()
    _part(run).write_bytes(data[: len(data) // 2])
    _error(run, "tasks-00000.parquet", "cut short", "killed or the disk full")


def test_chunk_cut_by_8_bytes(copy_of) -> None:
    run = copy_of()
    data = _part(run).read_bytes()
    _part(run).write_bytes(data[:-8])
    _error(run, "tasks-00000.parquet", "cut short")


def test_chunk_cut_by_8_bytes_without_a_listing(copy_of) -> None:
    """An older profile (no part listing in meta.json): the missing footer still tells."""
    run = copy_of()
    info = json.loads(_meta(run).read_text())
    del info["parts"], info["checksum"]
    _meta(run).write_text(json.dumps(info))
    data = _part(run).read_bytes()
    _part(run).write_bytes(data[:-8])
    _error(run, "tasks-00000.parquet", "without the Parquet footer", "killed or the disk full")


def test_chunk_replaced_by_random_bytes(copy_of) -> None:
    run = copy_of()
    size = _part(run).stat().st_size
    _part(run).write_bytes(os.urandom(size))
    _error(run, "tasks-00000.parquet")


def test_chunk_emptied(copy_of) -> None:
    run = copy_of()
    _part(run).write_bytes(b"")
    _error(run, "tasks-00000.parquet", "cut short")


def test_one_flipped_byte_is_caught_by_the_checksum(copy_of) -> None:
    run = copy_of()
    data = bytearray(_part(run, "memory").read_bytes())
    data[len(data) // 3] ^= 0x10
    _part(run, "memory").write_bytes(bytes(data))
    _error(run, "memory-00000.parquet", "checksum")


def test_a_missing_column(copy_of) -> None:
    run = copy_of()
    info = json.loads(_meta(run).read_text())
    del info["parts"], info["checksum"]  # as an older profile would be: only the schema tells
    _meta(run).write_text(json.dumps(info))
    table = pq.read_table(_part(run))
    pq.write_table(table.drop_columns(["end_ns"]), _part(run))
    _error(run, "tasks-00000.parquet", "lacks the column 'end_ns'")


def test_a_part_recorded_before_a_column_existed_loads_with_its_default(copy_of) -> None:
    """Profiles recorded before ``op_state`` and ``module_path`` existed: the reader asked
    pyarrow to read those string columns as dictionaries and failed on the part."""
    run = copy_of()
    rows = len(load(run).tasks)
    info = json.loads(_meta(run).read_text())
    del info["parts"], info["checksum"]  # as an older profile would be: only the schema tells
    _meta(run).write_text(json.dumps(info))
    table = pq.read_table(_part(run))
    pq.write_table(table.drop_columns(["op_state"]), _part(run))
    tasks = load(run).tasks
    assert len(tasks) == rows
    first = tasks["op_state"].astype(str).iloc[: table.num_rows]
    assert set(first) == {default_row("tasks")["op_state"]}


def test_a_column_of_the_wrong_type(copy_of) -> None:
    run = copy_of()
    info = json.loads(_meta(run).read_text())
    del info["parts"], info["checksum"]
    _meta(run).write_text(json.dumps(info))
    table = pq.read_table(_part(run, "steps"))
    i = table.column_names.index("start_ns")
    table = table.set_column(i, "start_ns", table.column(i).cast("double"))
    pq.write_table(table, _part(run, "steps"))
    _error(run, "steps-00000.parquet", "'start_ns' is double")


def test_a_deleted_chunk_of_a_finished_profile(copy_of) -> None:
    run = copy_of()
    _part(run, "host_events").unlink()
    _error(run, "host_events-00000.parquet", "missing")


# ---- meta.json ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (b"[1, 2, 3]", ("must be a JSON object", "a list")),
        (b'"a string"', ("must be a JSON object", "a string")),
        (b"null", ("must be a JSON object", "null")),
        (b'{"rank": "\xff\xfe"}', ("not valid UTF-8",)),
        (b"[" * 100_000 + b"]" * 100_000, ("nests deeper",)),
        (b'{"rank": 0, "status": "completed"', ("not valid JSON", "cut short")),
        (b"", ("empty",)),
    ],
    ids=["list", "string", "null", "invalid-utf8", "deeply-nested", "cut-short", "empty"],
)
def test_meta_json_that_is_no_object(copy_of, text: bytes, words: tuple[str, ...]) -> None:
    run = copy_of()
    _meta(run).write_bytes(text)
    _error(run, "meta.json", *words)


@pytest.mark.parametrize(
    ("rank", "kind"), [("0", "a string"), (None, "null"), ([0], "a list"), (-1, "between")]
)
def test_meta_rank_of_the_wrong_type(copy_of, rank: object, kind: str) -> None:
    run = copy_of()
    info = json.loads(_meta(run).read_text())
    info["rank"] = rank
    _meta(run).write_text(json.dumps(info))
    _error(run, "meta.json", "'rank'", kind)


def test_meta_without_rank(copy_of) -> None:
    run = copy_of()
    info = json.loads(_meta(run).read_text())
    del info["rank"]
    _meta(run).write_text(json.dumps(info))
    _error(run, "meta.json", "required key 'rank'")


def test_meta_of_a_newer_format(copy_of) -> None:
    run = copy_of()
    info = json.loads(_meta(run).read_text())
    info["format_version"] = 99
    _meta(run).write_text(json.dumps(sealed(info)))
    _error(run, "format_version 99", "newer msprof-py")


def test_meta_row_counts_disagreeing_with_the_parts(copy_of) -> None:
    run = copy_of()
    info = json.loads(_meta(run).read_text())
    info["rows"]["steps"] += 1
    _meta(run).write_text(json.dumps(sealed(info)))
    _error(run, "records", "rows of steps")


def test_meta_edited_after_recording_loads_with_a_warning(copy_of) -> None:
    run = copy_of()
    info = json.loads(_meta(run).read_text())
    info["hostname"] = "elsewhere"
    _meta(run).write_text(json.dumps(info))
    with pytest.warns(UserWarning, match="edited after recording"):
        profile = load(run)
    assert profile.meta[0]["hostname"] == "elsewhere" and profile.warnings


# ---- partial profiles --------------------------------------------------------------------


def _as_killed(run: Path) -> dict:
    """The run's meta.json as a recorder that was killed leaves it (still running)."""
    info = json.loads(_meta(run).read_text())
    info["status"] = "running"
    info.pop("rows")
    _meta(run).write_text(json.dumps(sealed(info)))
    return info


def test_partial_profile_drops_an_unlisted_half_written_chunk(copy_of, pristine) -> None:
    run = copy_of()
    info = _as_killed(run)
    whole = _part(run).read_bytes()
    # the next part, written after the last meta.json update (the recorder flushes at the
    # first step and then every second, so the pristine run may hold several parts already)
    listed = len(info["parts"]["tasks"])
    second = run / RAW / f"tasks-{listed:05d}.parquet"
    second.write_bytes(whole[: len(whole) // 2])
    (run / RAW / "memory-00001.parquet.tmp").write_bytes(b"PAR1 half")
    with pytest.warns(UserWarning) as caught:
        profile = load(run)
    assert profile.partial
    said = " ".join(str(w.message) for w in caught)
    assert second.name in said and "dropped" in said
    assert "memory-00001.parquet.tmp" in said
    whole_rows = sum(part["rows"] for part in info["parts"]["tasks"])
    assert len(profile.tasks) == whole_rows  # up to the last whole one
    assert profile.tasks.equals(load(pristine["a"]).tasks)


def test_partial_profile_without_meta_json(copy_of) -> None:
    run = copy_of()
    _meta(run).unlink()
    with pytest.warns(UserWarning, match="missing"):
        profile = load(run)
    assert profile.partial and profile.ranks == [0] and len(profile.tasks)


def test_analysis_and_report_say_partial(copy_of, tmp_path: Path) -> None:
    run = copy_of()
    _as_killed(run)
    result = _cli("analyze", run, "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["profile"]["partial"] is True and doc["profile"]["warnings"]
    assert "msprof: warning:" in result.stderr and "never finished" in result.stderr
    text = _cli("analyze", run)
    assert "partial profile" in text.stdout
    report = _cli("report", run, "-o", tmp_path / "r.html")
    assert report.exit_code == 0, report.output
    assert "Partial profile" in (tmp_path / "r.html").read_text()


def test_a_listed_chunk_that_is_damaged_is_an_error_even_when_partial(copy_of) -> None:
    run = copy_of()
    _as_killed(run)
    _part(run).write_bytes(_part(run).read_bytes()[:100])
    _error(run, "tasks-00000.parquet", "cut short")


# ---- commands ----------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["chunk", "meta"])
def test_every_command_exits_2_on_a_damaged_profile(
    copy_of, pristine, tmp_path: Path, damage: str
) -> None:
    run = copy_of()
    if damage == "chunk":
        _part(run).write_bytes(_part(run).read_bytes()[:-8])
    else:
        _meta(run).write_text("[]")
    budget = pristine["budget"]
    _clean_exit_2(_cli("analyze", run))
    _clean_exit_2(_cli("analyze", run, "--csv", tmp_path / "csv"))
    _clean_exit_2(_cli("report", run, "-o", tmp_path / "r.html"))
    _clean_exit_2(_cli("gate", run, "--budget", budget))
    _clean_exit_2(_cli("diff", pristine["b"], run))
    _clean_exit_2(_cli("diff", run, pristine["b"]))


@pytest.mark.parametrize("damage", ["chunk", "meta"])
def test_gate_with_a_damaged_baseline_exits_2(copy_of, pristine, damage: str) -> None:
    base = copy_of("b")
    if damage == "chunk":
        _part(base, "steps").write_bytes(b"garbage")
    else:
        _meta(base).write_bytes(b"\xff\xfe")
    _clean_exit_2(_cli("gate", pristine["a"], "--budget", pristine["budget"], "--baseline", base))


def test_warmup_larger_than_the_steps(pristine) -> None:
    steps = len(load(pristine["a"]).steps)
    result = _cli("analyze", pristine["a"], "--warmup", steps + 2)
    _clean_exit_2(result)
    assert f"the profile has {steps} step(s)" in result.stderr
    _clean_exit_2(_cli("gate", pristine["a"], "--budget", pristine["budget"], "--warmup", 50))
    _clean_exit_2(_cli("diff", pristine["b"], pristine["a"], "--warmup", 50))
    ok = _cli("analyze", pristine["a"], "--warmup", steps - 1, "--json")
    assert ok.exit_code == 0 and json.loads(ok.stdout)["profile"]["steps_analysed"] == [steps - 1]


# ---- budgets -----------------------------------------------------------------------------


def test_a_huge_budget_file_fails_fast_and_small(pristine, tmp_path: Path) -> None:
    budget = tmp_path / "huge.toml"
    with budget.open("w") as f:
        f.write("[absolute.op_type_time_ms]\n")
        for i in range(2_000_000):  # ~50 MB
            f.write(f"Op{i:07d} = 1.0\n")
    start = time.perf_counter()
    result = _cli("gate", pristine["a"], "--budget", budget)
    assert time.perf_counter() - start < 5
    _clean_exit_2(result)
    assert "more than the" in result.stderr


def test_many_op_type_keys_are_refused(tmp_path: Path) -> None:
    from msprof_py.gates.budget import MAX_OP_TYPE_KEYS, BudgetError, parse_budget

    lines = ["[absolute.op_type_time_ms]"] + [f"O{i} = 1" for i in range(MAX_OP_TYPE_KEYS + 1)]
    with pytest.raises(BudgetError, match="op types, more than"):
        parse_budget("\n".join(lines))
    ok = parse_budget("\n".join(lines[:-1]))
    assert len(ok.op_type_time_ms) == MAX_OP_TYPE_KEYS


# ---- CSV exports -------------------------------------------------------------------------


def test_csv_cells_are_neutralised() -> None:
    import io

    import pandas as pd

    from msprof_py.exporters.csv_tables import write_csv_table

    names = ["=HYPERLINK(1)", "+1+2", "-x", "@SUM(A1)", "\tTAB", "\rCR", "a\0b", 'q"uo,te', "n\nl"]
    frame = pd.DataFrame({"Name": names, "N": range(len(names)), "Num": ["-1", "+2.5", "3"] * 3})
    out = io.BytesIO()
    write_csv_table(frame, out)
    import csv

    rows = list(csv.reader(io.StringIO(out.getvalue().decode())))
    got = [r[0] for r in rows[1:]]
    assert got == [
        "'=HYPERLINK(1)",
        "'+1+2",
        "'-x",
        "'@SUM(A1)",
        "'\tTAB",
        "'\rCR",
        "ab",
        'q"uo,te',
        "n\nl",
    ]
    assert [r[2] for r in rows[1:4]] == ["-1", "+2.5", "3"]  # plain numbers stay numbers


def test_analyze_csv_neutralises_hostile_names(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).parents[1] / "analyzers"))
    from analyze_helpers import Builder, save  # the analyzers' test helpers

    b = Builder().step(0, 0, 100)
    b.op("=cmd|' /C calc'!A0", 0, 50, [{"start": 1, "end": 40, "op_type": "@evil"}])
    folder = save(b.build(), tmp_path / "p")
    result = _cli("analyze", folder, "--csv", tmp_path / "csv")
    assert result.exit_code == 0, result.output
    text = "".join(p.read_text() for p in (tmp_path / "csv").glob("*.csv"))
    assert "'@evil" in text
    for line in text.splitlines():
        for cell in line.split(","):
            assert not cell.startswith(("=", "@")), line


def test_file_names_from_recorded_values_stay_in_the_folder() -> None:
    from msprof_py.exporters.naming import file_component

    for hostile in ("../../etc/passwd", "/abs", "..", ".", "a/b\\c", ""):
        name = file_component(hostile)
        assert "/" not in name and "\\" not in name and name not in ("", ".", "..")
        assert not name.startswith(".")


# ---- process hygiene ---------------------------------------------------------------------


def _launch_until_ready(
    tmp_path: Path, script: Path, flag: Path, stderr: int
) -> tuple[subprocess.Popen, int]:
    """``msprof --output out python script`` started in ``tmp_path``, once the script has
    written its pid to ``flag``: (the launcher, the script's pid)."""
    launcher = subprocess.Popen(
        [sys.executable, "-m", "msprof_py.cli_entry", "--output", str(tmp_path / "out"),
         "python", str(script)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
    )  # fmt: skip
    for _ in range(600):
        if flag.exists() and flag.read_text():
            return launcher, int(flag.read_text())
        if launcher.poll() is not None:
            pytest.fail("msprof ended before the script was ready")
        time.sleep(0.1)
    launcher.kill()
    pytest.fail("the script did not get ready within a minute")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_application_dies_with_a_killed_msprof(tmp_path: Path) -> None:
    """SIGKILL msprof itself: the script it launched gets SIGTERM, so it stops and flushes,
    and a process the script started stops with it."""
    script = tmp_path / "train.py"
    flag, helper_flag = tmp_path / "ready", tmp_path / "helper"
    script.write_text(
        "import time, pathlib, subprocess, sys, torch\n"
        "helper = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"pathlib.Path({str(helper_flag)!r}).write_text(str(helper.pid))\n"
        "x = torch.ones(4, device='npu')\n"
        "for i in range(3):\n"
        "    (x * 2).sum().item()\n"
        "    torch.npu.synchronize()\n"
        f"pathlib.Path({str(flag)!r}).write_text(str(__import__('os').getpid()))\n"
        "while True:\n"
        "    (x + 1).sum().item()\n"
        "    time.sleep(0.01)\n"
    )
    launcher, child = _launch_until_ready(tmp_path, script, flag, subprocess.DEVNULL)
    try:
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(timeout=10)
        for _ in range(300):
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            os.kill(child, signal.SIGKILL)
            pytest.fail("the script trains on after msprof was killed")
        helper = int(helper_flag.read_text())
        for _ in range(300):
            try:
                os.kill(helper, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            status = Path(f"/proc/{helper}/status").read_text()
            os.kill(helper, signal.SIGKILL)
            pytest.fail(f"a process the script started runs on after msprof was killed: {status}")
    finally:
        if launcher.poll() is None:
            launcher.kill()
    runs = list((tmp_path / "out").glob("msprof_*/*_ascend_pt"))
    assert len(runs) == 1
    meta = runs[0] / RAW / "meta.json"
    for _ in range(100):  # the script's exit handler may still be writing
        if json.loads(meta.read_text()).get("status") != "running":
            break
        time.sleep(0.1)
    profile = load(runs[0])
    # the kernel sends the parent-death SIGTERM once per thread of the dying msprof: the
    # first one ends the script through the exit path, the later ones must not cut the save
    assert profile.meta[0]["status"] == "terminated", profile.meta[0]["status"]
    assert len(profile.tasks) > 0


def test_sigterm_repeated_during_the_save_keeps_the_profile(tmp_path: Path) -> None:
    """A burst of SIGTERMs (a supervisor's retries, or the parent-death signal sent once per
    thread of a dying msprof) ends the script once; the ones that land while the profile is
    being saved are ignored, so the profile is complete and says terminated."""
    script = tmp_path / "train.py"
    flag = tmp_path / "ready"
    script.write_text(
        "import os, pathlib, torch\n"
        "x = torch.ones(64, device='npu')\n"
        "for i in range(20):\n"
        "    (x * 2).sum().item()\n"
        f"pathlib.Path({str(flag)!r}).write_text(str(os.getpid()))\n"
        "while True:\n"
        "    (x + 1).sum().item()\n"
    )
    launcher, child = _launch_until_ready(tmp_path, script, flag, subprocess.PIPE)
    try:
        for _ in range(40):  # 40 signals 5 ms apart: some land inside the save
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGTERM)
            time.sleep(0.005)
        _, stderr = launcher.communicate(timeout=60)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 128 + signal.SIGTERM, stderr.decode()
    (run,) = (tmp_path / "out").glob("msprof_*/*_ascend_pt")
    profile = load(run)
    assert profile.meta[0]["status"] == "terminated"
    assert len(profile.tasks) >= 40  # every op before the signals, at least
