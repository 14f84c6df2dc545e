"""The simulated device's memory is host memory: keep its pages, as a device's caching
allocator keeps its blocks.

Every npu tensor's values live in a CPU tensor, allocated by the C library's ``malloc`` on the
thread that runs the op. Backward runs on autograd's npu device thread, which glibc gives an
arena of its own, and glibc hands that arena's freed memory back to the kernel at once: each
training step then touches fresh pages again (300-600 page faults per step of the ResNet
sample, 8-10% of its time in the kernel, against about 20 on CPU eager, where backward runs on
the main thread). A real NPU's memory comes from torch_npu's caching allocator, which keeps its
blocks. :func:`keep_freed_pages` sets glibc's thresholds (``mallopt``) so that freed memory is
kept for reuse: ``M_TRIM_THRESHOLD`` (free memory kept at an arena's top) and
``M_MMAP_THRESHOLD`` (allocations below it come from the arenas rather than their own
mappings; glibc's own dynamic threshold stops moving once it is set). This changes how much
freed memory the process keeps, never a value it computes.
"""

from __future__ import annotations

import ctypes
import os
import sys

__all__ = ["KEPT_FREE_BYTES", "MMAP_THRESHOLD_BYTES", "keep_freed_pages"]

#: mallopt(3) parameters (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: free memory an arena keeps at its top before giving it back
KEPT_FREE_BYTES = 256 << 20
#: allocations of this size and more get their own mapping (glibc's largest allowed value)
MMAP_THRESHOLD_BYTES = 32 << 20
#: environment variables through which a user sets these thresholds (theirs are kept)
USER_SETTINGS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES")
#: ``MSPROF_PY_HOST_MALLOC=default`` leaves malloc as the C library set it
SWITCH = "MSPROF_PY_HOST_MALLOC"


def keep_freed_pages() -> bool:
    """Set the thresholds where the C library is glibc, the user has set none of their own
    and :data:`SWITCH` does not say ``default``; whether they were set."""
    if (
        not sys.platform.startswith("linux")
        or os.environ.get(SWITCH, "keep") != "keep"
        or any(name in os.environ for name in USER_SETTINGS)
    ):
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_TRIM_THRESHOLD, KEPT_FREE_BYTES)) and bool(
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
    )
