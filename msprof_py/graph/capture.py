"""Graph capture: run ops through the normal adapter, keep their kernels off the engine.

While :func:`capturing` is active, every kernel the backend would launch (the fallback's
kernels, the TransData its formats need, explicit kernels' casts and copies) is appended to
the returned list as a :class:`~msprof_py.adapter.runtime.CapturedKernel` instead of reaching
the engine (no host launch cost, no task), and tensors created meanwhile take no device memory
of their own: they live in the graph's workspace, and those that leave the graph get memory
with :func:`msprof_py.adapter.tensors.hold_own_memory`. Values are computed exactly as in eager
mode.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from msprof_py.adapter.runtime import AdapterState, CapturedKernel


@contextmanager
def capturing(state: AdapterState) -> Iterator[list[CapturedKernel]]:
    """Divert ``state``'s kernel launches into a list for the duration of the block."""
    saved = state.capture
    captured: list[CapturedKernel] = []
    state.capture = captured
    try:
        yield captured
    finally:
        state.capture = saved
