"""`TPipe`, `TQue`, `TBuf`: on-chip buffer management as in Ascend C, with implicit flags.

``pipe.InitBuffer(que, num, nbytes)`` carves ``num`` buffers of ``nbytes`` (rounded up to the
buffer's alignment) out of the queue position's buffer, after what earlier InitBuffer calls
took; more than the buffer holds fails with one line naming the buffer, the bytes requested
and the bytes available. A queue's buffers cycle through AllocTensor -> EnQue -> DeQue ->
FreeTensor:

- ``EnQue`` is a SetFlag on the pipe that last wrote the tensor; the first instruction that
  touches it after ``DeQue`` waits for that flag (MTE2 -> V for a VECIN queue);
- ``FreeTensor`` is a SetFlag on the pipe that last used the tensor; the next tensor allocated
  in that buffer waits for it before it is written (V -> MTE2 for a VECIN queue).

So with two buffers (depth 2, double buffering) the copy of tile i+1 runs while tile i is
computed; with one it waits for the compute to free the buffer.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import Enum
from typing import Any

from msprof_py.kernels.chip import Buffer
from msprof_py.kernels.core import CoreState, current
from msprof_py.kernels.errors import BufferOverflowError, QueueError
from msprof_py.kernels.tensors import POSITION_BUFFER, LocalTensor, TPosition, as_dtype
from msprof_py.kernels.timeline import Pipe


class _State(Enum):
    FREE = "free"
    ALLOCATED = "allocated"
    QUEUED = "queued"
    DEQUEUED = "dequeued"


@dataclass
class _Slot:
    """One buffer of a queue and the flag times its users wait for."""

    queue: TQue
    index: int
    offset: int
    nbytes: int
    state: _State = _State.FREE
    #: (reason, cycle) the next instruction touching the tensor must wait for, if any
    pending: tuple[str, int] | None = None
    free_time: int = 0
    enqueue_time: int = 0
    last_pipe: Pipe | None = None
    last_writer: Pipe | None = None
    dtype: Any = None


def _reserve(core: CoreState, buffer: Buffer, total: int, what: str) -> int:
    """Hand out ``total`` bytes of ``buffer``; returns their offset or raises on overflow."""
    if buffer is Buffer.GM:
        raise QueueError(f"{what}: GM is not an on-chip buffer")
    core.check_owns(buffer, what)
    align = core.chip.alignment[buffer]
    offset = -(-core.used[buffer] // align) * align
    capacity = core.chip.capacity[buffer]
    if offset + total > capacity:
        raise BufferOverflowError(
            f"{buffer.value} overflow: {offset + total} B requested, {capacity} B available on "
            f"{core.chip.name} ({what} after {core.used[buffer]} B already in use)"
        )
    core.used[buffer] = offset + total
    return offset


class TQue:
    """A queue of ``depth`` buffers at ``position`` (give them bytes with TPipe.InitBuffer)."""

    def __init__(self, position: TPosition | str, depth: int = 1, name: str = "") -> None:
        self.position = TPosition(position)
        self.depth = depth
        self.name = name or f"TQue<{self.position.value}>"
        self._slots: list[_Slot] = []
        self._ring = 0
        self._fifo: deque[_Slot] = deque()
        self._core: CoreState | None = None

    @property
    def buffer(self) -> Buffer:
        """The physical buffer of the queue's position."""
        return POSITION_BUFFER[self.position]

    def _init(self, core: CoreState, num: int, nbytes: int) -> None:
        if self._slots:
            raise QueueError(f"{self.name}: InitBuffer called twice")
        if num < 1 or nbytes < 1:
            raise QueueError(f"{self.name}: InitBuffer needs num >= 1 and bytes >= 1")
        align = core.chip.alignment[self.buffer]
        size = -(-nbytes // align) * align
        what = f"InitBuffer of {self.name}: {num} x {size} B"
        base = _reserve(core, self.buffer, num * size, what)
        self._slots = [_Slot(self, i, base + i * size, size) for i in range(num)]
        self._core = core

    def _need_core(self, what: str) -> CoreState:
        if self._core is None:
            raise QueueError(f"{self.name}: {what} before pipe.InitBuffer")
        return self._core

    def AllocTensor(self, dtype: Any = "float16") -> LocalTensor:
        """Take the next free buffer as a tensor of ``dtype`` filling it."""
        core = self._need_core("AllocTensor")
        n = len(self._slots)
        for step in range(n):
            slot = self._slots[(self._ring + step) % n]
            if slot.state is _State.FREE:
                break
        else:
            raise QueueError(
                f"AllocTensor on {self.name}: all {n} buffers are in use (FreeTensor one first; "
                "on the device this would hang)"
            )
        self._ring = (slot.index + 1) % n
        slot.state = _State.ALLOCATED
        slot.pending = (f"{self.name}[{slot.index}] freed", slot.free_time)
        slot.last_pipe = slot.last_writer = None
        dt = slot.dtype = as_dtype(dtype)
        return LocalTensor(
            core,
            self.position,
            slot.offset,
            dt,
            slot.nbytes // dt.itemsize,
            f"{self.name}[{slot.index}]",
            slot,
        )

    def _slot_of(self, tensor: LocalTensor, what: str) -> _Slot:
        slot = tensor.slot
        if slot is None or slot.queue is not self:
            raise QueueError(f"{what} on {self.name}: {tensor.name} does not belong to it")
        return slot

    def EnQue(self, tensor: LocalTensor) -> None:
        """Hand a filled tensor to the consumer (a flag set on its producer pipe)."""
        core = self._need_core("EnQue")
        slot = self._slot_of(tensor, "EnQue")
        if slot.state is not _State.ALLOCATED:
            raise QueueError(f"EnQue on {self.name}: {tensor.name} is {slot.state.value}")
        if len(self._fifo) >= len(self._slots):
            raise QueueError(f"EnQue on {self.name}: the queue is full ({len(self._slots)})")
        slot.enqueue_time = core.timeline.ready_time(slot.last_writer)
        slot.state = _State.QUEUED
        self._fifo.append(slot)
        core.timeline.mark(slot.last_writer or Pipe.S, f"EnQue {tensor.name}", slot.enqueue_time)

    def DeQue(self, dtype: Any = None) -> LocalTensor:
        """Take the oldest queued tensor; its next user waits for the EnQue flag."""
        core = self._need_core("DeQue")
        if not self._fifo:
            raise QueueError(
                f"DeQue on {self.name}: nothing was EnQue'd (on the device this would hang)"
            )
        slot = self._fifo.popleft()
        slot.state = _State.DEQUEUED
        slot.pending = (f"{self.name}[{slot.index}] EnQue", slot.enqueue_time)
        dt = as_dtype(dtype) if dtype is not None else slot.dtype
        return LocalTensor(
            core,
            self.position,
            slot.offset,
            dt,
            slot.nbytes // dt.itemsize,
            f"{self.name}[{slot.index}]",
            slot,
        )

    def FreeTensor(self, tensor: LocalTensor) -> None:
        """Give the buffer back (a flag set on the pipe that last used it)."""
        core = self._need_core("FreeTensor")
        slot = self._slot_of(tensor, "FreeTensor")
        if slot.state is _State.FREE:
            raise QueueError(f"FreeTensor on {self.name}: {tensor.name} is already free")
        if slot in self._fifo:
            raise QueueError(f"FreeTensor on {self.name}: {tensor.name} is still queued")
        slot.free_time = core.timeline.ready_time(slot.last_pipe)
        slot.state = _State.FREE
        slot.pending = None
        core.timeline.mark(slot.last_pipe or Pipe.S, f"FreeTensor {tensor.name}", slot.free_time)


class TBuf:
    """A plain buffer at a position (VECCALC by default) for temporaries: no queue, no flags."""

    def __init__(self, position: TPosition | str = TPosition.VECCALC, name: str = "") -> None:
        self.position = TPosition(position)
        self.name = name or f"TBuf<{self.position.value}>"
        self.offset = -1
        self.nbytes = 0
        self._core: CoreState | None = None

    def _init(self, core: CoreState, nbytes: int) -> None:
        buffer = POSITION_BUFFER[self.position]
        align = core.chip.alignment[buffer]
        size = -(-nbytes // align) * align
        self.offset = _reserve(core, buffer, size, f"InitBuffer of {self.name}: {size} B")
        self.nbytes = size
        self._core = core

    def Get(self, dtype: Any = "float16", count: int | None = None) -> LocalTensor:
        """The buffer (or its first ``count`` elements) as a tensor of ``dtype``."""
        if self._core is None:
            raise QueueError(f"{self.name}: Get before pipe.InitBuffer")
        dt = as_dtype(dtype)
        n = self.nbytes // dt.itemsize if count is None else count
        if n * dt.itemsize > self.nbytes:
            raise QueueError(f"{self.name}.Get: {n} x {dt} exceeds its {self.nbytes} B")
        return LocalTensor(self._core, self.position, self.offset, dt, n, self.name)


class TPipe:
    """Owns a block's on-chip buffers; create it inside the kernel body."""

    def __init__(self) -> None:
        self._core = current()

    def InitBuffer(self, target: TQue | TBuf, num_or_bytes: int, nbytes: int | None = None) -> None:
        """``InitBuffer(que, num, bytes)`` for a queue, ``InitBuffer(tbuf, bytes)`` for a TBuf."""
        if isinstance(target, TBuf):
            target._init(self._core, num_or_bytes if nbytes is None else nbytes)
        elif nbytes is None:
            raise QueueError(f"InitBuffer of {target.name}: give the number of buffers and bytes")
        else:
            target._init(self._core, num_or_bytes, nbytes)
