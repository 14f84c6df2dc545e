"""The process-wide ACL runtime state: the simulated device, handles and buffers."""

from __future__ import annotations

from bisect import bisect_right, insort
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from msprof_py.acl import constants as C
from msprof_py.device.engine import Event, Stream
from msprof_py.device.simulator import SimulatedNpu
from msprof_py.device.spec import DeviceSpec

_HOST_BASE = 0x7F00_0000_0000


class AclError(RuntimeError):
    """An ACL call failed. ``ret`` holds the ACL error code pyACL would have returned."""

    def __init__(self, ret: int, message: str) -> None:
        super().__init__(f"{message} (ACL error {ret})")
        self.ret = ret


@dataclass(slots=True)
class Buffer:
    """A block of host or device memory the ACL API handed out."""

    address: int
    size: int
    on_device: bool
    pinned: bool
    #: the bytes; None on the device when numerics are off
    data: np.ndarray | None


class Runtime:
    """State behind ``msprof_py.acl``: one device, its stream/event handles and buffers."""

    def __init__(self) -> None:
        self.initialized = False
        self.spec: DeviceSpec | None = None
        self.numerics = True
        self.device: SimulatedNpu | None = None
        self.device_id: int | None = None
        self.streams: dict[int, Stream] = {}
        self.events: dict[int, Event] = {}
        self._buffers: dict[int, Buffer] = {}
        self._starts: list[int] = []
        self._next_host = _HOST_BASE

    # ---- lifecycle --------------------------------------------------------------------------

    def init(self, device: str | Path | DeviceSpec | None, numerics: bool) -> None:
        if self.initialized:
            raise AclError(C.ACL_ERROR_REPEAT_INITIALIZE, "acl.init called twice")
        self.spec = DeviceSpec.load(device)
        self.numerics = numerics
        self.initialized = True

    def finalize(self) -> None:
        self.__init__()  # type: ignore[misc]

    def require_init(self) -> None:
        if not self.initialized:
            raise AclError(C.ACL_ERROR_UNINITIALIZE, "acl.init has not been called")

    def set_device(self, device_id: int) -> SimulatedNpu:
        self.require_init()
        if device_id != 0:
            raise AclError(C.ACL_ERROR_INVALID_DEVICE, f"no device {device_id}: one device (0)")
        if self.device is None:
            self.device = SimulatedNpu(self.spec, device_id)
            self.streams[0] = self.device.engine.default_stream
        self.device_id = device_id
        return self.device

    def npu(self) -> SimulatedNpu:
        if self.device is None:
            raise AclError(C.ACL_ERROR_INVALID_DEVICE, "no device set: call acl.rt.set_device(0)")
        return self.device

    # ---- handles ----------------------------------------------------------------------------

    def stream(self, handle: int | None) -> Stream:
        npu = self.npu()
        if handle is None or handle == 0:
            return npu.engine.default_stream
        try:
            return self.streams[handle]
        except KeyError:
            raise AclError(C.ACL_ERROR_INVALID_PARAM, f"unknown stream handle {handle}") from None

    def event(self, handle: int) -> Event:
        try:
            return self.events[handle]
        except KeyError:
            raise AclError(C.ACL_ERROR_INVALID_PARAM, f"unknown event handle {handle}") from None

    # ---- buffers ----------------------------------------------------------------------------

    def add_buffer(self, buffer: Buffer) -> int:
        self._buffers[buffer.address] = buffer
        insort(self._starts, buffer.address)
        return buffer.address

    def new_host_address(self, size: int) -> int:
        address = self._next_host
        self._next_host += (size + 4095) // 4096 * 4096 + 4096
        return address

    def remove_buffer(self, address: int, on_device: bool) -> Buffer:
        buffer = self._buffers.get(address)
        if buffer is None or buffer.on_device != on_device:
            where = "device" if on_device else "host"
            raise AclError(C.ACL_ERROR_INVALID_PARAM, f"{address:#x} is not a {where} allocation")
        del self._buffers[address]
        self._starts.remove(address)
        return buffer

    def resolve(self, address: int, count: int) -> tuple[Buffer, int]:
        """The buffer holding ``[address, address + count)`` and the offset into it."""
        i = bisect_right(self._starts, address) - 1
        if i >= 0:
            buffer = self._buffers[self._starts[i]]
            offset = address - buffer.address
            if offset + count <= buffer.size:
                return buffer, offset
        raise AclError(
            C.ACL_ERROR_INVALID_PARAM, f"{count} bytes at {address:#x} are not inside any buffer"
        )


RUNTIME = Runtime()
