"""Errors a kernel raises: each is one line naming the buffer, tensor or event and the limit."""

from __future__ import annotations


class KernelError(Exception):
    """Base class: a kernel the simulated chip cannot run as written (the message says why)."""


class BufferOverflowError(KernelError):
    """An on-chip buffer (UB, L1, L0A, L0B, L0C) was asked for more bytes than it holds."""


class AlignmentError(KernelError):
    """A tensor address or a transfer length is not a multiple of the buffer's alignment."""


class SyncError(KernelError):
    """A wait no set can satisfy (the device would hang), a bad event id, or a data race
    between two pipes that no flag or queue orders."""


class QueueError(KernelError):
    """A TQue / TBuf used out of order: allocate with no free buffer, DeQue of an empty queue,
    EnQue past the queue depth, FreeTensor of a tensor the queue does not own."""


class OperandError(KernelError):
    """An instruction got operands it cannot take: wrong position, dtype, or too few elements."""
