"""torch.npu streams and events order work across streams, and copies overlap compute."""

from __future__ import annotations

import pytest
import torch

from msprof_py.device import EventNotReadyError, SimulatedNpu, TaskLog
from msprof_py.device.tasklog import overlap_length


def test_streams_and_the_current_stream(npu: SimulatedNpu, log: TaskLog) -> None:
    side = torch.npu.Stream()
    assert side != torch.npu.default_stream() and side.stream_id > 0
    assert torch.npu.current_stream() == torch.npu.default_stream()
    x = torch.randn(64, 64, device="npu")
    with torch.npu.stream(side):
        assert torch.npu.current_stream() == side
        y = x @ x
    assert torch.npu.current_stream() == torch.npu.default_stream()
    mm = next(t for t in log.tasks if t.name == "aten::mm")
    assert mm.stream_id == side.stream_id
    torch.npu.set_stream(side)
    try:
        (y + 1).sum()
        assert log.tasks[-1].stream_id == side.stream_id
    finally:
        torch.npu.set_stream(torch.npu.default_stream())
    with side:
        x.relu()
    assert log.tasks[-1].stream_id == side.stream_id


def test_events_order_streams_and_time_in_simulated_ms(npu: SimulatedNpu, log: TaskLog) -> None:
    side = torch.npu.Stream()
    a = torch.randn(2048, 2048, device="npu")
    start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
    start.record()
    b = a @ a
    end.record()
    end.wait(side)
    with torch.npu.stream(side):
        c = b.relu()
    mm = next(t for t in log.tasks if t.name == "aten::mm")
    relu = next(t for t in log.tasks if t.name == "aten::relu")
    assert relu.stream_id == side.stream_id and relu.start_ns >= mm.end_ns
    assert not end.query()
    with pytest.raises(EventNotReadyError):
        start.elapsed_time(end)
    end.synchronize()
    assert end.query()
    elapsed = start.elapsed_time(end)
    assert elapsed == pytest.approx((mm.end_ns - start._event.recorded_ns) / 1e6)
    assert elapsed >= mm.duration_ns / 1e6
    side.synchronize()
    assert side.query() and c.shape == b.shape


def test_wait_stream_and_synchronize(npu: SimulatedNpu, log: TaskLog) -> None:
    side = torch.npu.Stream()
    with torch.npu.stream(side):
        big = torch.randn(4096, 4096, device="npu")
        product = big @ big
    torch.npu.current_stream().wait_stream(side)
    after = product + 1
    add = log.tasks[-1]
    mm = next(t for t in log.tasks if t.name == "aten::mm")
    assert add.start_ns >= mm.end_ns and after.shape == product.shape
    torch.npu.synchronize()
    assert npu.engine.host_ns >= add.end_ns


def test_prefetch_on_a_side_stream_overlaps_compute(npu: SimulatedNpu, log: TaskLog) -> None:
    copy_stream = torch.npu.Stream()
    weights = torch.randn(4096, 4096, device="npu")
    batches = [torch.randn(1024, 4096).pin_memory() for _ in range(4)]
    with torch.npu.stream(copy_stream):
        nxt = batches[0].to("npu", non_blocking=True)
    for i in range(4):
        torch.npu.current_stream().wait_stream(copy_stream)
        current = nxt
        if i + 1 < 4:
            with torch.npu.stream(copy_stream):
                nxt = batches[i + 1].to("npu", non_blocking=True)
        (current @ weights).relu()
    torch.npu.synchronize()
    copies = [(t.start_ns, t.end_ns) for t in log.tasks if t.op_type == "MEMCPY_H2D"]
    compute = [(t.start_ns, t.end_ns) for t in log.tasks if t.name == "aten::mm"]
    assert len(copies) >= 4 and len(compute) == 4
    assert overlap_length(copies[-4:], compute) > 0.5 * sum(e - s for s, e in compute[:3])
