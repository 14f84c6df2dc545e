"""What the recorder writes is what the device said: every recorded task and allocator event
matches the record it came from, field by field (kind texts, shapes and dtypes as text, the
attribute columns, whose texts are remembered for the dicts the adapter shares)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from msprof_py.adapter.compile_cache import DYNAMIC_ATTRS, STATIC_ATTRS
from msprof_py.collectors import recorder


def test_attribute_columns_of_shared_and_per_task_dicts() -> None:
    assert recorder._shared_attr_fields(STATIC_ATTRS)[6] == "static"
    assert recorder._shared_attr_fields(DYNAMIC_ATTRS)[6] == "dynamic"
    assert recorder._shared_attr_fields(STATIC_ATTRS)[6] == "static"  # remembered
    copy = {"copy_kind": "HOST_TO_DEVICE", "pinned": True}
    assert recorder._shared_attr_fields(copy)[:2] == ("HOST_TO_DEVICE", True)
    assert id(copy) not in recorder._attr_rows  # a dict per task is not kept
    collective = {"collective": "allreduce", "algorithm": "ring", "world_size": 4,
                  "notify_wait_ns": 750}  # fmt: skip
    assert recorder._shared_attr_fields(collective)[2:6] == ("allreduce", "ring", 4, 750)


RECORDED = """
import sys, torch
from msprof_py.collectors.session import SessionConfig, start_session
from msprof_py.adapter import runtime
from msprof_py.device import TaskRecord, MemoryRecord
session = start_session(SessionConfig(output=sys.argv[1], export=False, deterministic=True))
rows = []
def snapshot(r):  # what each record holds when it is emitted
    if isinstance(r, TaskRecord):
        rows.append(("task", r.task_id, r.stream_id, r.name, r.start_ns, r.end_ns,
                     tuple(map(tuple, r.input_shapes)), tuple(r.output_dtypes),
                     dict(r.attrs or {})))
    elif isinstance(r, MemoryRecord):
        rows.append(("memory", r.time_ns, r.action.value, r.address, r.size, r.allocated))
runtime.state().npu.subscribe(snapshot)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
model = model.to("npu")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 16).to("npu", non_blocking=True)
for _ in range(3):
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
print(session.stop())
import json, pathlib
pathlib.Path(sys.argv[2]).write_text(json.dumps(rows))
"""


def test_recorded_tasks_and_memory_are_the_emitted_records(
    tmp_path: Path,
) -> None:
    from msprof_py.profile import load

    snapshot = tmp_path / "emitted.json"
    proc = subprocess.run(
        [sys.executable, "-c", RECORDED, str(tmp_path / "out"), str(snapshot)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    profile = load(Path(proc.stdout.strip().splitlines()[-1]))
    emitted = json.loads(snapshot.read_text())
    tasks = profile.tasks.sort_values("task_id")
    want_tasks = [r for r in emitted if r[0] == "task"]
    assert len(tasks) == len(want_tasks) > 20
    for (_, task_id, stream, name, start, end, shapes, dtypes, attrs), row in zip(
        want_tasks, tasks.itertuples(), strict=True
    ):
        assert (row.task_id, row.stream_id, row.name) == (task_id, stream, name)
        assert (row.start_ns, row.end_ns) == (start, end)
        assert row.input_shapes == ";".join(",".join(map(str, s)) for s in shapes)
        assert row.output_dtypes == ";".join(dtypes)
        assert row.copy_kind == attrs.get("copy_kind", "")
        assert row.op_state == attrs.get("op_state", "")
    want_memory = [tuple(r[1:]) for r in emitted if r[0] == "memory"]
    memory = profile.memory
    columns = ["time_ns", "action", "address", "size", "allocated"]
    got = list(memory[columns].itertuples(index=False, name=None))
    assert got == want_memory and len(got) > 10
