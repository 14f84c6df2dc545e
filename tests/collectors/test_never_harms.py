"""The profiler never harms the run it watches: a full disk, os._exit and a segfault."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

import msprof_py.profile.writer as writer_module
from msprof_py.profile import load
from msprof_py.profile.writer import RawWriter
from tests.collectors.scripts import LINEAR_STEPS as STEPS

MSPROF = [sys.executable, "-m", "msprof_py.cli_entry"]


def _msprof(tmp_path: Path, body: str, output: Path) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(body))
    return subprocess.run(
        [*MSPROF, "--output", str(output), "--no-report", "python", str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _rank_dir(output: Path) -> Path:
    (rank,) = output.glob("msprof_*/*_ascend_pt")
    return rank


def test_os_exit_keeps_the_profile(tmp_path: Path) -> None:
    result = _msprof(tmp_path, STEPS.format(steps=3, end="os._exit(7)"), tmp_path / "out")
    assert result.returncode == 7, result.stderr
    profile = load(_rank_dir(tmp_path / "out"))
    assert len(profile.steps) == 3 and not profile.partial
    assert profile.meta[0]["status"] == "completed"


def test_a_segfault_keeps_the_steps_before_it(tmp_path: Path) -> None:
    body = STEPS.format(steps=2, end="import ctypes; ctypes.string_at(0)")
    result = _msprof(tmp_path, body, tmp_path / "out")
    assert result.returncode == 128 + 11
    assert "the application crashed (signal 11, SIGSEGV) after" in result.stderr
    assert "Traceback" not in result.stderr
    profile = load(_rank_dir(tmp_path / "out"))  # partial, loadable
    assert profile.partial and len(profile.steps) >= 1


def test_a_failing_writer_stops_recording_without_raising(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    writer = RawWriter(tmp_path / "raw", {"rank": 0, "status": "running"}, chunk_rows=4)
    for i in range(8):
        writer.append("steps", (i, i, i + 1, "optimizer", 0))
    writer.drain()  # the writer thread wrote the two chunks handed to it

    def disk_full(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", "steps-00002.parquet")

    monkeypatch.setattr(writer_module, "_write_part", disk_full)
    for i in range(8, 20):  # never raises into the caller
        writer.append("steps", (i, i, i + 1, "optimizer", 0))
    writer.flush()
    assert writer.failed == "No space left on device (steps-00002.parquet)"
    err = capsys.readouterr().err
    assert err.count("msprof: warning: recording stopped: No space left on device") == 1
    profile = load(tmp_path / "raw")
    assert profile.partial and list(profile.steps["step"]) == list(range(8))
    assert any("recording stopped early" in str(w) for w in profile.warnings)


def test_flushes_from_other_threads_lose_and_double_no_row(tmp_path: Path) -> None:
    """Autograd's thread, a DataLoader's and the SIGTERM watchdog append and flush while the
    main thread does: meta.json once counted rows appended during another flush that no part
    held (a SIGTERM test failed to load: "meta.json records 29067 rows, its parts hold 29031")."""
    import threading

    writer = RawWriter(tmp_path / "raw", {"rank": 0, "status": "running"}, chunk_rows=64)
    total, done = 20_000, threading.Event()

    def append() -> None:
        for i in range(total):
            writer.append("steps", (i, i, i + 1, "optimizer", 0))
        done.set()

    def flush() -> None:
        while not done.is_set():
            writer.flush()

    threads = [threading.Thread(target=append), threading.Thread(target=flush)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    writer.flush()
    profile = load(tmp_path / "raw")  # validates meta's row counts against the parts
    assert sorted(profile.steps["step"]) == list(range(total))


@pytest.fixture
def small_disk(tmp_path: Path):
    mount = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", str(mount)], capture_output=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {made.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_full_disk_never_stops_the_training(tmp_path: Path, small_disk: Path) -> None:
    body = STEPS.format(steps=1500, end='print("trained to the end")')
    result = _msprof(tmp_path, body, small_disk)
    assert result.returncode == 0, result.stderr[-2000:]  # the script's own exit code
    assert "trained to the end" in result.stdout
    assert "msprof: warning: recording stopped: No space left on device" in result.stderr
    assert "Traceback" not in result.stderr
    profile = load(_rank_dir(small_disk))  # what fitted is loadable, and says it is partial
    assert profile.partial and len(profile.steps) > 0


def _step(i: int) -> tuple:
    return (i, i, i + 1, "optimizer", 0)


def test_chunk_flushes_list_their_parts_once_per_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """meta.json lists every part, so rewriting it per part made a long run pay more and more
    per chunk: full chunks go to the writer thread at once and are listed together at the
    timed flush."""
    writes: list[int] = []
    real = writer_module.write_meta_file

    def counted(path: Path, meta: dict) -> None:
        writes.append(len(meta["parts"]["steps"]))
        real(path, meta)

    monkeypatch.setattr(writer_module, "write_meta_file", counted)
    monkeypatch.setattr(writer_module, "FLUSH_INTERVAL_S", 3600.0)
    writer = RawWriter(tmp_path / "raw", {"rank": 0, "status": "running"}, chunk_rows=4)
    for i in range(40):
        writer.append("steps", _step(i))
    writer.drain()
    assert len(list((tmp_path / "raw").glob("steps-*.parquet"))) == 10
    assert writes == [0]  # the folder's first meta.json only
    # a crash now keeps every chunk: a partial profile reads the parts meta.json does not list
    assert sorted(load(tmp_path / "raw").steps["step"]) == list(range(40))
    writer.flush_if_due()
    assert writes == [0]  # not due yet
    writer._last_flush -= 3600.0
    writer.flush_if_due()
    assert writes == [0, 10]  # one rewrite lists the ten parts
    writer.meta["status"] = "completed"
    writer.flush()
    profile = load(tmp_path / "raw")  # complete: parts and row counts checked against meta
    assert sorted(profile.steps["step"]) == list(range(40))


def test_the_flush_interval_grows_with_the_parts_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer_module, "PARTS_PER_INTERVAL_S", 4)
    writer = RawWriter(Path("/nonexistent"), {"rank": 0})
    assert writer.flush_interval() == writer_module.FLUSH_INTERVAL_S
    writer._parts["tasks"] = 6
    writer._parts["memory"] = 6
    assert writer.flush_interval() == 3 * writer_module.FLUSH_INTERVAL_S


def test_the_final_flush_writes_meta_json_once_with_every_part(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = RawWriter(tmp_path / "raw", {"rank": 0, "status": "running"}, chunk_rows=4)
    for i in range(6):  # one full chunk handed to the writer thread, two rows buffered
        writer.append("steps", (i, i, i + 1, "optimizer", 0))
    writes: list[dict] = []
    real_write = writer_module.write_meta_file
    monkeypatch.setattr(
        writer_module,
        "write_meta_file",
        lambda path, meta: (writes.append(json.loads(json.dumps(meta))), real_write(path, meta)),
    )
    writer.meta["status"] = "completed"
    writer.flush()
    assert len(writes) == 1
    (final,) = writes
    assert final["status"] == "completed" and final["rows"]["steps"] == 6
    assert [part["rows"] for part in final["parts"]["steps"]] == [4, 2]
    assert len(load(tmp_path / "raw").steps) == 6
