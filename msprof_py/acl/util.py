"""``acl.util``: moving between numpy arrays and ACL pointers."""

from __future__ import annotations

import numpy as np

from msprof_py.acl import constants as C
from msprof_py.acl._runtime import RUNTIME, AclError, Buffer


def numpy_to_ptr(array: np.ndarray) -> int:
    """Register a C-contiguous numpy array as pageable host memory and return its pointer.

    The pointer shares the array's memory: copying to it writes into the array. Copies from
    pageable memory block the host; use :func:`msprof_py.acl.rt.malloc_host` for async copies.
    """
    RUNTIME.require_init()
    if not array.flags.c_contiguous:
        raise AclError(C.ACL_ERROR_INVALID_PARAM, "numpy_to_ptr needs a C-contiguous array")
    data = array.reshape(-1).view(np.uint8)
    address = RUNTIME.new_host_address(data.size)
    RUNTIME.add_buffer(Buffer(address, data.size, False, False, data))
    return address


def ptr_to_numpy(ptr: int, shape: tuple[int, ...], dtype: str | np.dtype) -> np.ndarray:
    """A numpy view of ``shape`` and ``dtype`` over the memory at ``ptr`` (host or device)."""
    dt = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    buffer, offset = RUNTIME.resolve(ptr, count)
    if buffer.data is None:
        raise AclError(
            C.ACL_ERROR_INVALID_PARAM, "device data is not kept: acl.init(numerics=False)"
        )
    return buffer.data[offset : offset + count].view(dt).reshape(shape)
