"""A Python API shaped like Huawei's pyACL, over the simulated NPU.

    import msprof_py.acl as acl
    acl.init()
    acl.rt.set_device(0)
    stream, _ = acl.rt.create_stream()
    dev, _ = acl.rt.malloc(nbytes, acl.ACL_MEM_MALLOC_HUGE_FIRST)
    acl.rt.memcpy_async(dev, nbytes, host, nbytes, acl.ACL_MEMCPY_HOST_TO_DEVICE, stream)

Differences from pyACL: ``init`` takes the device spec (preset name, spec file or DeviceSpec) and
``numerics`` (False skips the real arithmetic and keeps no device bytes, for large simulations);
failures raise :class:`AclError` with the ACL error code instead of returning it; and
:func:`current_device` gives the simulated device, so its timeline can be inspected.
"""

from __future__ import annotations

from pathlib import Path

from msprof_py.acl import op, rt, util
from msprof_py.acl._runtime import RUNTIME, AclError
from msprof_py.acl.constants import *  # noqa: F403 - the ACL constants are part of this API
from msprof_py.acl.constants import ACL_SUCCESS
from msprof_py.device.simulator import SimulatedNpu
from msprof_py.device.spec import DeviceSpec

__all__ = ["AclError", "current_device", "finalize", "init", "op", "rt", "util"]


def init(
    config_path: str | None = None,
    *,
    device: str | Path | DeviceSpec | None = None,
    numerics: bool = True,
) -> int:
    """Initialise ACL. ``config_path`` is accepted for pyACL compatibility and ignored."""
    RUNTIME.init(device, numerics)
    return ACL_SUCCESS


def finalize() -> int:
    """Release everything ACL holds; :func:`init` may be called again afterwards."""
    RUNTIME.finalize()
    return ACL_SUCCESS


def current_device() -> SimulatedNpu:
    """The simulated device opened by ``acl.rt.set_device`` (subscribe to it for records)."""
    return RUNTIME.npu()
