"""Registering ``npu`` as torch's PrivateUse1 device: name, device module, guard and hooks."""

from __future__ import annotations

import torch


class _DeviceGuard(torch._C._acc.DeviceGuard):
    """The device guard torch asks for when switching devices: one device, npu:0."""

    def type_(self) -> torch._C._autograd.DeviceType:
        return torch._C._autograd.DeviceType.PrivateUse1


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    """Answers torch's questions about the backend."""

    def is_available(self) -> bool:
        return True

    def has_primary_context(self, dev_id: int) -> bool:
        return True

    def is_built(self) -> bool:
        return True


def register_device() -> None:
    """Name PrivateUse1 ``npu`` and attach the device guard and hooks (once per process).

    The device module (``torch.npu``) is registered by the caller afterwards: it refers to
    ``torch.device("npu")``, which exists only after the rename.
    """
    torch.utils.rename_privateuse1_backend("npu")
    torch.utils.generate_methods_for_privateuse1_backend()
    torch._C._acc.register_python_privateuseone_hook(_Hooks())
    torch._C._acc.register_python_privateuseone_device_guard(_DeviceGuard())
