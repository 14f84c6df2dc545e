"""``acl.rt``: runtime calls shaped like pyACL's (devices, streams, events, memory, copies).

Calls return what pyACL returns — a return code, or a tuple ending with one — and the code is
always ``ACL_SUCCESS``: failures raise :class:`~msprof_py.acl.AclError` carrying the ACL error
code instead of being returned, so a mistake is never silently ignored.
"""

from __future__ import annotations

import numpy as np

from msprof_py.acl import constants as C
from msprof_py.acl._runtime import RUNTIME, AclError, Buffer
from msprof_py.device.errors import DeviceError
from msprof_py.device.memory import MallocPolicy, NpuOutOfMemoryError
from msprof_py.device.records import CopyKind

_KINDS = {
    C.ACL_MEMCPY_HOST_TO_HOST: CopyKind.H2H,
    C.ACL_MEMCPY_HOST_TO_DEVICE: CopyKind.H2D,
    C.ACL_MEMCPY_DEVICE_TO_HOST: CopyKind.D2H,
    C.ACL_MEMCPY_DEVICE_TO_DEVICE: CopyKind.D2D,
}
_OK = C.ACL_SUCCESS


# ---- devices ---------------------------------------------------------------------------------


def set_device(device_id: int) -> int:
    """Open device ``device_id`` (only 0 exists) and make it current."""
    RUNTIME.set_device(device_id)
    return _OK


def get_device() -> tuple[int, int]:
    """The current device id."""
    RUNTIME.npu()
    assert RUNTIME.device_id is not None
    return RUNTIME.device_id, _OK


def reset_device(device_id: int) -> int:
    """Wait for the device to finish its work (resources stay usable in the simulation)."""
    RUNTIME.npu().engine.synchronize_device()
    return _OK


def synchronize_device() -> int:
    """Block until all work on the device has finished."""
    RUNTIME.npu().engine.synchronize_device()
    return _OK


def get_run_mode() -> tuple[int, int]:
    """0 = ACL_DEVICE (the app runs on a host with the device attached), as on a training server."""
    return 0, _OK


# ---- streams ---------------------------------------------------------------------------------


def create_stream() -> tuple[int, int]:
    """Create a stream; returns its handle."""
    stream = RUNTIME.npu().engine.create_stream()
    handle = stream.stream_id
    RUNTIME.streams[handle] = stream
    return handle, _OK


def destroy_stream(stream: int) -> int:
    """Destroy a stream after its work has finished."""
    if not stream:
        raise AclError(C.ACL_ERROR_INVALID_PARAM, "the default stream cannot be destroyed")
    RUNTIME.npu().engine.destroy_stream(RUNTIME.stream(stream))
    del RUNTIME.streams[stream]
    return _OK


def synchronize_stream(stream: int) -> int:
    """Block until every task on ``stream`` has finished."""
    RUNTIME.npu().engine.synchronize_stream(RUNTIME.stream(stream))
    return _OK


# ---- events ----------------------------------------------------------------------------------


def create_event() -> tuple[int, int]:
    """Create an event with timing enabled; returns its handle."""
    event = RUNTIME.npu().engine.create_event()
    handle = event.event_id + 1
    RUNTIME.events[handle] = event
    return handle, _OK


def destroy_event(event: int) -> int:
    """Destroy an event."""
    RUNTIME.event(event)
    del RUNTIME.events[event]
    return _OK


def record_event(event: int, stream: int) -> int:
    """Record ``event`` on ``stream``."""
    RUNTIME.npu().engine.record_event(RUNTIME.event(event), RUNTIME.stream(stream))
    return _OK


def stream_wait_event(stream: int, event: int) -> int:
    """Make ``stream`` wait until ``event`` has completed."""
    RUNTIME.npu().engine.wait_event(RUNTIME.stream(stream), RUNTIME.event(event))
    return _OK


def synchronize_event(event: int) -> int:
    """Block the host until ``event`` has completed."""
    RUNTIME.npu().engine.synchronize_event(RUNTIME.event(event))
    return _OK


def query_event_status(event: int) -> tuple[int, int]:
    """ACL_EVENT_RECORDED_STATUS_COMPLETE when the event has completed, else NOT_READY."""
    done = RUNTIME.npu().engine.query_event(RUNTIME.event(event))
    status = C.ACL_EVENT_RECORDED_STATUS_COMPLETE if done else C.ACL_EVENT_RECORDED_STATUS_NOT_READY
    return status, _OK


def event_elapsed_time(start: int, end: int) -> tuple[float, int]:
    """Simulated milliseconds between two completed events."""
    try:
        ms = RUNTIME.npu().engine.event_elapsed_ms(RUNTIME.event(start), RUNTIME.event(end))
    except DeviceError as exc:
        raise AclError(C.ACL_ERROR_RT_EVENT_NOT_COMPLETE, str(exc)) from None
    return ms, _OK


# ---- memory ----------------------------------------------------------------------------------


def _device_malloc(size: int, policy: int, align32: bool) -> tuple[int, int]:
    npu = RUNTIME.npu()
    if size <= 0:
        raise AclError(C.ACL_ERROR_INVALID_PARAM, f"cannot allocate {size} bytes")
    try:
        address = npu.hbm.malloc(size, MallocPolicy(policy), align32=align32)
    except NpuOutOfMemoryError as exc:
        raise AclError(C.ACL_ERROR_RT_MEMORY_ALLOCATION, str(exc)) from None
    except ValueError:
        raise AclError(C.ACL_ERROR_INVALID_PARAM, f"unknown malloc policy {policy}") from None
    data = np.zeros(size, dtype=np.uint8) if RUNTIME.numerics else None
    RUNTIME.add_buffer(Buffer(address, size, True, False, data))
    return address, _OK


def malloc(size: int, policy: int = C.ACL_MEM_MALLOC_HUGE_FIRST) -> tuple[int, int]:
    """aclrtMalloc: device memory, size rounded up to 32 B plus 32 B, 64 B-aligned."""
    return _device_malloc(size, policy, align32=False)


def malloc_align32(size: int, policy: int = C.ACL_MEM_MALLOC_HUGE_FIRST) -> tuple[int, int]:
    """aclrtMallocAlign32: like :func:`malloc` without the extra 32 bytes."""
    return _device_malloc(size, policy, align32=True)


def free(dev_ptr: int) -> int:
    """Free device memory from :func:`malloc`."""
    RUNTIME.remove_buffer(dev_ptr, on_device=True)
    RUNTIME.npu().hbm.free(dev_ptr)
    return _OK


def malloc_host(size: int) -> tuple[int, int]:
    """aclrtMallocHost: page-locked (pinned) host memory; copies from it are asynchronous."""
    RUNTIME.require_init()
    if size <= 0:
        raise AclError(C.ACL_ERROR_INVALID_PARAM, f"cannot allocate {size} bytes")
    address = RUNTIME.new_host_address(size)
    RUNTIME.add_buffer(Buffer(address, size, False, True, np.zeros(size, dtype=np.uint8)))
    return address, _OK


def free_host(host_ptr: int) -> int:
    """Free host memory from :func:`malloc_host`."""
    buffer = RUNTIME.remove_buffer(host_ptr, on_device=False)
    if not buffer.pinned:
        RUNTIME.add_buffer(buffer)
        raise AclError(C.ACL_ERROR_INVALID_PARAM, f"{host_ptr:#x} was not allocated by malloc_host")
    return _OK


def get_mem_info(attr: int = C.ACL_HBM_MEM) -> tuple[int, int, int]:
    """aclrtGetMemInfo: (free, total, ret) of device memory, excluding the system reserve."""
    free_bytes, total = RUNTIME.npu().hbm.get_mem_info()
    return free_bytes, total, _OK


def memset(dev_ptr: int, max_count: int, value: int, count: int) -> int:
    """Fill ``count`` bytes of device memory with ``value`` and wait for it."""
    memset_async(dev_ptr, max_count, value, count, 0)
    return synchronize_stream(0)


def memset_async(dev_ptr: int, max_count: int, value: int, count: int, stream: int) -> int:
    """Fill ``count`` bytes of device memory with ``value`` on ``stream``."""
    if count > max_count:
        raise AclError(C.ACL_ERROR_INVALID_PARAM, f"count {count} exceeds max_count {max_count}")
    buffer, offset = RUNTIME.resolve(dev_ptr, count)
    if not buffer.on_device:
        raise AclError(C.ACL_ERROR_INVALID_PARAM, f"{dev_ptr:#x} is not device memory")
    if buffer.data is not None:
        buffer.data[offset : offset + count] = value & 0xFF
    RUNTIME.npu().engine.submit_memset(RUNTIME.stream(stream), count)
    return _OK


def _copy(dst: int, dest_max: int, src: int, count: int, kind: int, stream: int, sync: bool) -> int:
    copy_kind = _KINDS.get(kind)
    if copy_kind is None:
        raise AclError(C.ACL_ERROR_INVALID_PARAM, f"unknown memcpy kind {kind}")
    if count > dest_max:
        raise AclError(C.ACL_ERROR_INVALID_PARAM, f"count {count} exceeds dest_max {dest_max}")
    src_buf, src_off = RUNTIME.resolve(src, count)
    dst_buf, dst_off = RUNTIME.resolve(dst, count)
    want_src = copy_kind in (CopyKind.D2H, CopyKind.D2D)
    want_dst = copy_kind in (CopyKind.H2D, CopyKind.D2D)
    if src_buf.on_device != want_src or dst_buf.on_device != want_dst:
        raise AclError(
            C.ACL_ERROR_INVALID_PARAM, f"buffers do not match memcpy kind {copy_kind.value}"
        )
    if not sync and copy_kind is CopyKind.H2H:
        raise AclError(
            C.ACL_ERROR_INVALID_PARAM, "asynchronous host-to-host copies are not supported"
        )
    if src_buf.data is not None and dst_buf.data is not None:
        dst_buf.data[dst_off : dst_off + count] = src_buf.data[src_off : src_off + count]
    host = dst_buf if copy_kind is CopyKind.D2H else src_buf
    pinned = host.pinned or copy_kind is CopyKind.D2D
    RUNTIME.npu().engine.submit_memcpy(
        RUNTIME.stream(stream), copy_kind, count, pinned=pinned, blocking=sync
    )
    return _OK


def memcpy(dst: int, dest_max: int, src: int, count: int, kind: int) -> int:
    """Synchronous copy: returns when the data has arrived."""
    return _copy(dst, dest_max, src, count, kind, 0, sync=True)


def memcpy_async(dst: int, dest_max: int, src: int, count: int, kind: int, stream: int) -> int:
    """Asynchronous copy on ``stream``; blocks the host when the host side is pageable memory."""
    return _copy(dst, dest_max, src, count, kind, stream, sync=False)
