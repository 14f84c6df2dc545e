"""The pyACL-shaped API: lifecycle, memory, copies with real bytes, events and ops."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import msprof_py.acl as acl
from msprof_py.device import HostKind, TaskLog, TaskType


@pytest.fixture
def log() -> Iterator[TaskLog]:
    acl.init()
    acl.rt.set_device(0)
    records = TaskLog()
    acl.current_device().subscribe(records)
    yield records
    acl.finalize()


def test_lifecycle_errors() -> None:
    with pytest.raises(acl.AclError, match="ACL error 100001"):
        acl.rt.set_device(0)
    acl.init()
    try:
        with pytest.raises(acl.AclError) as info:
            acl.init()
        assert info.value.ret == acl.ACL_ERROR_REPEAT_INITIALIZE
        with pytest.raises(acl.AclError, match="no device set"):
            acl.rt.create_stream()
        with pytest.raises(acl.AclError) as info:
            acl.rt.set_device(3)
        assert info.value.ret == acl.ACL_ERROR_INVALID_DEVICE
        assert acl.rt.set_device(0) == acl.ACL_SUCCESS
        assert acl.rt.get_device() == (0, acl.ACL_SUCCESS)
    finally:
        acl.finalize()


def test_data_round_trips_through_the_device(log: TaskLog) -> None:
    data = np.arange(1000, dtype=np.float32)
    nbytes = data.nbytes
    dev, ret = acl.rt.malloc(nbytes, acl.ACL_MEM_MALLOC_HUGE_FIRST)
    assert ret == acl.ACL_SUCCESS and dev % 64 == 0
    host_in = acl.util.numpy_to_ptr(data)
    out = np.zeros_like(data)
    host_out = acl.util.numpy_to_ptr(out)
    acl.rt.memcpy(dev, nbytes, host_in, nbytes, acl.ACL_MEMCPY_HOST_TO_DEVICE)
    acl.rt.memcpy(host_out, nbytes, dev, nbytes, acl.ACL_MEMCPY_DEVICE_TO_HOST)
    np.testing.assert_array_equal(out, data)
    kinds = [t.op_type for t in log.copies()]
    assert kinds == ["MEMCPY_H2D", "MEMCPY_D2H"]
    assert acl.rt.free(dev) == acl.ACL_SUCCESS


def test_pinned_async_copy_does_not_block_but_pageable_does(log: TaskLog) -> None:
    stream, _ = acl.rt.create_stream()
    engine = acl.current_device().engine
    nbytes = 8 * 2**20
    dev, _ = acl.rt.malloc(nbytes)
    pinned, _ = acl.rt.malloc_host(nbytes)
    acl.rt.memcpy_async(dev, nbytes, pinned, nbytes, acl.ACL_MEMCPY_HOST_TO_DEVICE, stream)
    assert engine.host_ns < log.tasks[-1].end_ns
    pageable = acl.util.numpy_to_ptr(np.zeros(nbytes, np.uint8))
    acl.rt.memcpy_async(dev, nbytes, pageable, nbytes, acl.ACL_MEMCPY_HOST_TO_DEVICE, stream)
    assert engine.host_ns > log.tasks[-1].end_ns
    assert log.tasks[-1].attrs == {"copy_kind": "HOST_TO_DEVICE", "pinned": False}
    assert any(h.kind is HostKind.SYNC for h in log.host)


def test_copy_argument_errors(log: TaskLog) -> None:
    dev, _ = acl.rt.malloc(1024)
    host, _ = acl.rt.malloc_host(1024)
    with pytest.raises(acl.AclError, match="do not match memcpy kind"):
        acl.rt.memcpy(dev, 1024, host, 1024, acl.ACL_MEMCPY_DEVICE_TO_HOST)
    with pytest.raises(acl.AclError, match="exceeds dest_max"):
        acl.rt.memcpy(dev, 10, host, 1024, acl.ACL_MEMCPY_HOST_TO_DEVICE)
    with pytest.raises(acl.AclError, match="not inside any buffer"):
        acl.rt.memcpy(dev, 4096, host, 4096, acl.ACL_MEMCPY_HOST_TO_DEVICE)
    with pytest.raises(acl.AclError, match="not a device allocation"):
        acl.rt.free(host)
    with pytest.raises(acl.AclError, match="asynchronous host-to-host"):
        acl.rt.memcpy_async(host, 1024, host, 1024, acl.ACL_MEMCPY_HOST_TO_HOST, 0)


def test_memory_policies_and_mem_info(log: TaskLog) -> None:
    free_before, total, _ = acl.rt.get_mem_info(acl.ACL_HBM_MEM)
    assert total == 62 * 2**30  # 64 GiB minus the 2 GiB system reserve
    big, _ = acl.rt.malloc(3 * 2**20, acl.ACL_MEM_MALLOC_HUGE_ONLY)
    assert big % (2 * 2**20) == 0
    free_after, _, _ = acl.rt.get_mem_info(acl.ACL_HBM_MEM)
    assert free_before - free_after == 4 * 2**20  # 3 MiB + 64 B rounds to two huge pages
    small, _ = acl.rt.malloc(100, acl.ACL_MEM_MALLOC_NORMAL_ONLY)
    assert small % 64 == 0
    with pytest.raises(acl.AclError) as info:
        acl.rt.malloc(2**40)
    assert info.value.ret == acl.ACL_ERROR_RT_MEMORY_ALLOCATION
    assert "out of memory" in str(info.value)


def test_events_order_streams_and_measure_time(log: TaskLog) -> None:
    s1, _ = acl.rt.create_stream()
    s2, _ = acl.rt.create_stream()
    n = 2048
    a, _ = acl.rt.malloc(n * n * 2)
    c, _ = acl.rt.malloc(n * n * 2)
    start, _ = acl.rt.create_event()
    end, _ = acl.rt.create_event()
    acl.rt.record_event(start, s1)
    acl.op.matmul(a, a, c, n, n, n, "float16", s1)
    acl.rt.record_event(end, s1)
    acl.rt.stream_wait_event(s2, end)
    acl.op.relu(c, c, n * n, "float16", s2)
    status, _ = acl.rt.query_event_status(end)
    assert status == acl.ACL_EVENT_RECORDED_STATUS_NOT_READY
    with pytest.raises(acl.AclError) as info:
        acl.rt.event_elapsed_time(start, end)
    assert info.value.ret == acl.ACL_ERROR_RT_EVENT_NOT_COMPLETE
    acl.rt.synchronize_stream(s2)
    status, _ = acl.rt.query_event_status(end)
    assert status == acl.ACL_EVENT_RECORDED_STATUS_COMPLETE
    mm, relu = [t for t in log.kernels()]
    assert mm.op_type == "MatMul" and mm.task_type is TaskType.AI_CORE
    assert relu.start_ns >= mm.end_ns and relu.task_type is TaskType.AI_VECTOR_CORE
    ms, _ = acl.rt.event_elapsed_time(start, end)
    assert ms * 1e6 == pytest.approx(mm.end_ns - log.tasks[0].end_ns)


def test_ops_compute_real_results(log: TaskLog) -> None:
    rng = np.random.default_rng(1)
    m, n, k = 33, 17, 65
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    ptr = {}
    for name, array in (("a", a), ("b", b)):
        ptr[name], _ = acl.rt.malloc(array.nbytes)
        acl.rt.memcpy(
            ptr[name],
            array.nbytes,
            acl.util.numpy_to_ptr(array),
            array.nbytes,
            acl.ACL_MEMCPY_HOST_TO_DEVICE,
        )
    c, _ = acl.rt.malloc(m * n * 2)
    acl.op.matmul(ptr["a"], ptr["b"], c, m, n, k, "float16")
    expected = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(acl.util.ptr_to_numpy(c, (m, n), np.float16), expected)
    acl.op.add(c, c, c, m * n, "float16")
    np.testing.assert_array_equal(acl.util.ptr_to_numpy(c, (m, n), np.float16), expected * 2)
    acl.op.mul(c, c, c, m * n, "float16")
    acl.op.relu(c, c, m * n, "float16")
    assert (acl.util.ptr_to_numpy(c, (m, n), np.float16) >= 0).all()
    with pytest.raises(acl.AclError, match="host memory"):
        acl.op.relu(acl.util.numpy_to_ptr(a), c, 4, "float16")


def test_memset(log: TaskLog) -> None:
    dev, _ = acl.rt.malloc(256)
    acl.rt.memset(dev, 256, 7, 128)
    view = acl.util.ptr_to_numpy(dev, (256,), np.uint8)
    assert (view[:128] == 7).all() and (view[128:] == 0).all()
    assert log.tasks[-1].op_type == "MEMSET"


def test_without_numerics_no_device_bytes_are_kept() -> None:
    acl.init(numerics=False, device="ascend910a")
    try:
        acl.rt.set_device(0)
        assert acl.current_device().spec.name == "ascend910a"
        dev, _ = acl.rt.malloc(2**30)
        acl.op.relu(dev, dev, 2**29, "float16")
        with pytest.raises(acl.AclError, match="numerics=False"):
            acl.util.ptr_to_numpy(dev, (4,), np.float16)
    finally:
        acl.finalize()


def test_streams_can_be_destroyed(log: TaskLog) -> None:
    stream, _ = acl.rt.create_stream()
    assert acl.rt.destroy_stream(stream) == acl.ACL_SUCCESS
    with pytest.raises(acl.AclError, match="unknown stream"):
        acl.rt.synchronize_stream(stream)
    with pytest.raises(acl.AclError, match="default stream"):
        acl.rt.destroy_stream(0)
