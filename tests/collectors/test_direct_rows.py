"""The compiled row path of recording (issue 20): row buffers and the engine core's direct sink.

Where ``msprof_py/device/native`` is built, the raw writer buffers rows as typed columns
(``RowBuffer``) and, while the recorder is the bus's only subscriber, the engine core writes a
kernel launch's task and launch rows, and the row of a host blocked on a full queue, itself
(``RowSink``) instead of emitting records. Both
must give exactly the tables the record path gives: the same program is recorded three ways
(direct sink, with the compiled per-op kernel writing host op rows; the same with that kernel
handing every op to Python; record path through the compiled buffers, forced by a second
subscriber; and everything in Python with ``MSPROF_NATIVE=0``) and every table is compared.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from raw_tables import read_raw_tables

from msprof_py.adapter import native as adapter_native
from msprof_py.device import RecordBus
from msprof_py.device import native as device_native
from msprof_py.profile.schema import RAW_DIR, TABLES, Table
from msprof_py.profile.writer import RawWriter, _rows_to_table, new_rows, take_table

CORE = device_native.load()
ADAPTER_NATIVE = adapter_native.load()
needs_core = pytest.mark.skipif(CORE is None, reason="compiled device cores not built")

PROGRAM = """
import json, queue, sys, threading, torch
import msprof_py
from msprof_py.collectors.session import SessionConfig, start_session
from msprof_py.adapter import runtime
session = start_session(SessionConfig(output=sys.argv[1], export=False, deterministic=True,
                                      warmup=1, iteration=2))
from msprof_py.adapter import backend
bus = runtime.state().npu.engine.bus
if sys.argv[2] == "records":
    runtime.state().npu.subscribe(lambda record: None)  # a second listener: no direct sink
if sys.argv[2] == "python-kernel":
    backend.NATIVE.set_direct(False)  # the compiled kernel hands every op to Python
used = type(bus.direct).__name__
before = backend.NATIVE.counts() if backend.NATIVE is not None else (0, 0, 0, 0)
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.Flatten(),
    torch.nn.Linear(8 * 6 * 6, 4)).to("npu")
opt = torch.optim.AdamW(model.parameters(), lr=0.01)
x = torch.randn(4, 3, 8, 8).to("npu", non_blocking=True)
# ops launched from another thread: one for the whole run (threads started and joined one
# after another may or may not get the ident of the one before, which the thread column
# follows, and that would differ from run to run)
requests, done = queue.Queue(), queue.Queue()
def side():
    while requests.get():
        y = torch.ones(16, device="npu") * 3
        y.add_(1)
        done.put(True)
side_thread = threading.Thread(target=side)
side_thread.start()
for step in range(4):
    opt.zero_grad()
    with msprof_py.annotate("forward"):
        loss = model(x).square().mean()
    loss.backward()
    opt.step()
    requests.put(True)
    done.get()
    if step == 2:  # more launches than the task queue holds: the host blocks on it
        z = torch.ones(64, device="npu")
        for _ in range(1500):
            z = (z * 0.5).add_(1.0)
    loss.item()
    msprof_py.step()
requests.put(False)
side_thread.join()
after = backend.NATIVE.counts() if backend.NATIVE is not None else (0, 0, 0, 0)
print(json.dumps({"run": str(session.stop()), "direct": used,
                  "recorded_in_cpp": after[3] - before[3]}))
"""


def _record(tmp_path: Path, mode: str) -> tuple[dict[str, pa.Table], str, int]:
    env = dict(os.environ)
    if mode == "python":
        env["MSPROF_NATIVE"] = "0"
    out = tmp_path / mode
    proc = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(out), mode],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    tables = read_raw_tables(Path(result["run"]) / RAW_DIR)
    return tables, result["direct"], result["recorded_in_cpp"]


@needs_core
def test_direct_rows_equal_the_record_path_and_the_python_path(tmp_path: Path) -> None:
    direct, used, in_cpp = _record(tmp_path, "direct")
    assert used == "RowSink"  # the engine core wrote the launch rows
    if ADAPTER_NATIVE is not None:
        assert in_cpp > 50  # the compiled kernel wrote host op rows itself
    records, used, _ = _record(tmp_path, "records")
    assert used == "NoneType"  # launches recorded as records (host op rows still by the sink)
    python, _, _ = _record(tmp_path, "python")
    runs = {"records": records, "python": python}
    if ADAPTER_NATIVE is not None:
        kernel_off, used, in_cpp = _record(tmp_path, "python-kernel")
        assert used == "RowSink" and in_cpp == 0
        runs["python-kernel"] = kernel_off
    for mode, tables in runs.items():
        assert direct.keys() == tables.keys(), mode
        for name in direct:
            assert direct[name].equals(tables[name]), (mode, name)
    assert {"tasks", "host_events", "memory", "steps"} <= direct.keys()
    tasks = direct["tasks"].to_pydict()
    kinds = direct["host_events"].column("kind").to_pylist()
    assert kinds.count("launch") > 50 and tasks["kind"].count("kernel") > 50
    # the host blocked: on full queues (rows the engine core writes) and on .item()
    names = direct["host_events"].column("name").to_pylist()
    blocked = {name for kind, name in zip(kinds, names, strict=True) if kind == "sync"}
    assert blocked & {"stream queue full", "task queue full"} and len(blocked) >= 2, blocked
    assert set(tasks["step"]) == {1, 2}  # the iteration window: warm-up step 0 left out
    # the main thread, autograd's device thread (backward) and the side thread
    assert len(set(direct["host_events"].column("thread").to_pylist())) == 3


def test_the_bus_offers_a_direct_sink_only_to_its_one_subscriber() -> None:
    class Owner:
        direct_sink = object()

        def __call__(self, record: object) -> None:
            pass

    bus = RecordBus()
    owner = Owner()
    assert bus.direct is None and not bus.active
    bus.subscribe(owner)
    assert bus.direct is Owner.direct_sink and bus.active
    other = [].append
    bus.subscribe(other)
    assert bus.direct is None  # the other listener needs the records
    bus.unsubscribe(other)
    assert bus.direct is Owner.direct_sink
    bus.unsubscribe(owner)
    assert bus.direct is None and not bus.active
    bus.subscribe(other)
    assert bus.direct is None  # a plain callable offers none


# ---- RowBuffer: typed columns give the table the row tuples give ---------------------------

_VALUES = {
    pa.int64(): st.integers(-(2**63), 2**63 - 1),
    pa.int32(): st.integers(-(2**31), 2**31 - 1),
    pa.float64(): st.floats(allow_nan=False),
    pa.bool_(): st.booleans(),
    pa.string(): st.sampled_from(["", "aten::mm", "MatMul", "2,3;4", "ü€"]) | st.text(max_size=8),
}


def _row(table: Table) -> st.SearchStrategy[tuple]:
    return st.tuples(*(st.none() | _VALUES[c.type] for c in table.columns))


@needs_core
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_row_buffers_give_the_tables_row_tuples_give(data: st.DataObject) -> None:
    table = TABLES[data.draw(st.sampled_from(sorted(TABLES)))]
    batches = data.draw(st.lists(st.lists(_row(table), max_size=40), min_size=1, max_size=3))
    rows = new_rows(table)
    assert isinstance(rows, CORE.RowBuffer)
    strings = {c.name for c in table.columns if c.type == pa.string()}
    for batch in batches:  # several chunks: each take starts the next one empty
        for row in batch:
            rows.append(row)
        assert len(rows) == len(batch)
        got = take_table(rows, table)
        assert len(rows) == 0
        # strings come dictionary-encoded (what Parquet writes as its dictionary page)
        assert all(pa.types.is_dictionary(f.type) for f in got.schema if f.name in strings)
        assert got.cast(table.schema).equals(_rows_to_table(batch, table))


@needs_core
def test_a_row_that_does_not_fit_stops_recording_with_one_clear_reason(tmp_path: Path) -> None:
    writer = RawWriter(tmp_path / "raw", {})
    good = (0, 0, 0, "memory_alloc", "", 1, 2, 0, "x")
    writer.append("steps", (0, 0, 10, "optimizer", 0))
    writer.append("steps", (1, "ten", 20, "optimizer", 0))
    assert writer.failed is not None
    assert writer.failed.startswith("a steps row does not fit its columns: column 1:")
    writer.append("memory", good)  # ignored from now on
    assert writer.after_direct_rows("tasks") is False  # a sink stops writing too


@needs_core
def test_an_append_run_by_a_conversion_keeps_both_rows_whole() -> None:
    rows = CORE.RowBuffer("qs")

    class Sneaky:
        """An integer whose conversion appends a row of its own (as a finalizer could)."""

        def __index__(self) -> int:
            rows.append((7, "inner"))
            return 5

    rows.append((Sneaky(), "outer"))
    count, columns = rows.take()
    assert count == 2
    values = pa.Array.from_buffers(pa.int64(), 2, [None, pa.py_buffer(columns[0][0])])
    texts = _texts(columns[1])
    assert list(zip(values.to_pylist(), texts, strict=True)) == [
        (7, "inner"),
        (5, "outer"),
    ]


def _texts(column: tuple) -> list[str]:
    codes, _, dictionary = column
    return [dictionary[code] for code in memoryview(codes).cast("i")]


@needs_core
def test_string_codes_follow_the_text_not_the_object() -> None:
    """Codes are remembered by object: strings made afresh for each row (freed after it, so
    a later one may take the same address) and equal strings that are other objects still get
    the code of their text."""
    rows = CORE.RowBuffer("s")
    encoded = [f"op{k}".encode() for k in range(7)]
    expected = []
    for i in range(400):
        # a new object every row, the row's only allocation of its size: once freed, the
        # next row's text usually takes its address
        k = i * 5 % 7
        text = encoded[k].decode()
        rows.append((text,))
        expected.append(f"op{k}")
        del text
    rows.append(("op0",))
    rows.append(("".join(["o", "p0"]),))
    expected += ["op0", "op0"]
    count, columns = rows.take()
    assert count == len(expected)
    assert _texts(columns[0]) == expected
    assert len(columns[0][2]) == len(set(expected))  # one dictionary entry per text


@needs_core
def test_row_buffer_refuses_what_its_columns_cannot_hold() -> None:
    rows = CORE.RowBuffer("ibs")
    with pytest.raises(OverflowError, match="column 0"):
        rows.append((2**31, True, "x"))
    with pytest.raises(TypeError, match="column 1: expected bool"):
        rows.append((1, 1, "x"))
    with pytest.raises(TypeError, match="column 2: expected str"):
        rows.append((1, True, 3))
    with pytest.raises(TypeError, match="a row is a tuple of 3 values"):
        rows.append((1, True))
    with pytest.raises(ValueError, match="column kind"):
        CORE.RowBuffer("qx")
    assert len(rows) == 0  # nothing half-written


def test_without_the_compiled_core_rows_are_tuples() -> None:
    rows = new_rows(TABLES["steps"], compiled=False)
    assert rows == []
    rows.append((0, 0, 10, "optimizer", 0))
    assert take_table(rows, TABLES["steps"]).num_rows == 1 and rows == []


@needs_core
def test_a_row_buffer_made_for_a_chunk_fills_past_it_and_hands_over_its_arrays() -> None:
    rows = CORE.RowBuffer("qdsb", capacity=300)
    expected = [(i, i / 4, f"s{i % 7}", i % 3 == 0) for i in range(1000)]  # grows past 300
    for row in expected:
        rows.append(row)
    rows.append((None, None, None, None))
    count, columns = rows.take()
    assert count == 1001 and len(rows) == 0
    (ints, valid, _), (floats, _, _), (codes, _, dictionary), (bits, _, _) = columns
    assert memoryview(ints).readonly and len(memoryview(ints)) == 8 * 1001
    table = pa.Table.from_arrays(
        [
            pa.Array.from_buffers(pa.int64(), count, [pa.py_buffer(valid), pa.py_buffer(ints)]),
            pa.Array.from_buffers(pa.float64(), count, [None, pa.py_buffer(floats)]),
            pa.Array.from_buffers(pa.int32(), count, [None, pa.py_buffer(codes)]),
            pa.Array.from_buffers(pa.bool_(), count, [None, pa.py_buffer(bits)]),
        ],
        names=["i", "d", "code", "b"],
    )
    del ints, floats, codes, bits, columns  # Arrow's buffers keep the arrays alive
    got = table.to_pydict()
    assert got["i"] == [r[0] for r in expected] + [None]
    assert got["d"][:1000] == [r[1] for r in expected]
    assert [dictionary[c] for c in got["code"][:1000]] == [r[2] for r in expected]
    assert got["b"][:1000] == [r[3] for r in expected]
    rows.append((1, 1.0, "again", True))  # the buffer starts its next chunk
    assert rows.take()[0] == 1
    with pytest.raises(ValueError, match="capacity"):
        CORE.RowBuffer("q", capacity=-1)
