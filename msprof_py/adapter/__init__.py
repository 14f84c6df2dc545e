"""The ``npu`` device for PyTorch, backed by the simulated NPU (a torch_npu-like adapter).

    import msprof_py.adapter
    npu = msprof_py.adapter.install()          # once per process
    model = MyModel().to("npu")
    ...
    npu.engine.host_ns                          # the simulated timeline can be inspected

``numerics="cpu"`` computes every value on the CPU (bitwise what the same program computes on
CPU); ``numerics="none"`` runs on shapes only (meta tensors): values the host sent read back
exactly, framework reads of computed values (GradScaler, DDP ...) get placeholder zeros, and any
other read fails clearly (:mod:`msprof_py.adapter.shapes_only`). ``host_time="modeled"``
charges the spec's dispatch cost per op (deterministic); ``"measured"`` adds the real time the
script spends between ops.
"""

from __future__ import annotations

import sys
from pathlib import Path

from msprof_py.adapter import runtime
from msprof_py.adapter.errors import NpuOutOfMemory, NumericsNoneError
from msprof_py.adapter.runtime import HOST_TIMES, NUMERICS, AdapterState, Settings
from msprof_py.device import SimulatedNpu
from msprof_py.device.spec import DeviceSpec

__all__ = ["NpuOutOfMemory", "NumericsNoneError", "current_device", "install", "is_installed"]


def _settings_key(device: str | Path | DeviceSpec, numerics: str, host_time: str) -> Settings:
    spec = DeviceSpec.load(device)
    return Settings(device=f"{spec.name}@{spec.origin}", numerics=numerics, host_time=host_time)


def install(
    device: str | Path | DeviceSpec = "ascend910b",
    numerics: str = "cpu",
    host_time: str = "modeled",
) -> SimulatedNpu:
    """Register the ``npu`` device with torch and return the simulated device behind it.

    Calling it again with the same settings returns the same device; different settings raise
    (a process has one npu backend).
    """
    if numerics not in NUMERICS:
        raise ValueError(f"numerics must be one of {', '.join(NUMERICS)}, got {numerics!r}")
    if host_time not in HOST_TIMES:
        raise ValueError(f"host_time must be one of {', '.join(HOST_TIMES)}, got {host_time!r}")
    settings = _settings_key(device, numerics, host_time)
    if runtime.STATE is not None:
        if runtime.STATE.settings != settings:
            raise RuntimeError(
                "the npu device is already installed with different settings "
                f"({runtime.STATE.settings}); a process has one npu backend"
            )
        return runtime.STATE.npu

    from msprof_py.adapter.selftest import check_torch

    check_torch()
    import torch

    from msprof_py.adapter.registration import register_device

    register_device()
    from msprof_py.adapter import amp, backend, compat, kernels, npu_amp, npu_module

    backend.check_native()
    from msprof_py.adapter import backward_thread
    from msprof_py.device import native as device_native

    backward_thread.install()
    device_core = device_native.load()
    if device_core is not None:  # the row sink's thread column (its C calls' too)
        backward_thread.add_listener(device_core.set_backward_thread)
    from msprof_py.adapter.host_memory import keep_freed_pages

    keep_freed_pages()

    runtime.STATE = AdapterState(settings, SimulatedNpu(DeviceSpec.load(device)))
    torch._register_device_module("npu", npu_module)
    kernels.register()
    amp.register()
    compat.apply(npu_module)
    npu_module.amp = npu_amp  # type: ignore[attr-defined]
    sys.modules.setdefault("torch.npu", npu_module)
    sys.modules.setdefault("torch.npu.amp", npu_amp)
    sys.modules.setdefault("torch.npu.random", npu_module.random)
    from msprof_py.adapter import distributed
    from msprof_py.adapter.shim import install_import_hook

    install_import_hook()
    distributed.register()
    assert torch.npu is npu_module
    return runtime.STATE.npu


def is_installed() -> bool:
    """True once :func:`install` has run in this process."""
    return runtime.STATE is not None


def current_device() -> SimulatedNpu:
    """The simulated device behind ``npu`` (raises if not installed)."""
    return runtime.state().npu
