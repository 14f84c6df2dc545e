"""L2 reuse between kernels: which bytes a kernel reads are still in L2.

The L2 cache (``memory.l2_bytes``) sits between HBM and the cores: every byte a kernel reads
from or writes to HBM passes through it. :class:`L2Residency` follows that traffic in
submission order at tensor granularity, as a least-recently-used cache of device buffers
keyed by their device address: a kernel's write makes its output buffer the most recent, a
read that misses brings the buffer in, and buffers are evicted oldest first once the resident
bytes exceed the capacity. A read of a buffer still resident is served from L2 (for the bytes
resident), so a producer's output that its consumer reads before ``l2_bytes`` of other traffic
went through L2 costs L2 bandwidth instead of HBM bandwidth
(:func:`msprof_py.device.costmodel.with_l2_reads` re-costs the kernel).

A buffer larger than the whole cache never becomes resident and evicts everything (a
streaming pass over it evicts the cache and its own head before the tail is written; a
consumer reading it from the start misses throughout). Writes still cost HBM bandwidth
(write-back). The rule is deterministic: the same launches in the same order give the same
hits.
"""

from __future__ import annotations

from collections import OrderedDict


class L2Residency:
    """An LRU cache of device buffers (address -> resident bytes) of ``capacity`` bytes."""

    __slots__ = ("_lines", "capacity", "resident")

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError("L2 capacity must be >= 0")
        self.capacity = capacity
        #: bytes resident over all buffers
        self.resident = 0
        self._lines: OrderedDict[int, int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._lines)

    def __contains__(self, address: int) -> bool:
        return address in self._lines

    def read(self, address: int, nbytes: int) -> int:
        """A kernel reads ``nbytes`` of the buffer at ``address``: the bytes served from L2
        (those resident; 0 on a miss). The buffer becomes the most recently used; a miss
        brings it in."""
        held = self._lines.get(address)
        if held is None:
            self._insert(address, nbytes)
            return 0
        hit = min(held, nbytes)
        if nbytes > held:
            self._insert(address, nbytes)
        else:
            self._lines.move_to_end(address)
        return hit

    def write(self, address: int, nbytes: int) -> None:
        """A kernel writes ``nbytes`` of the buffer at ``address``: it becomes the most recently
        used, older buffers are evicted until the resident bytes fit."""
        self._insert(address, nbytes)

    def clear(self) -> None:
        """Forget every resident buffer (a cold cache)."""
        self._lines.clear()
        self.resident = 0

    def _insert(self, address: int, nbytes: int) -> None:
        old = self._lines.pop(address, 0)
        self.resident -= old
        if nbytes > self.capacity:  # streaming through L2 evicts everything, itself too
            self.clear()
            return
        if nbytes <= 0:
            return
        self._lines[address] = nbytes
        self.resident += nbytes
        lines = self._lines
        while self.resident > self.capacity:
            _, evicted = lines.popitem(last=False)
            self.resident -= evicted
