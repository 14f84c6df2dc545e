"""Install-time check of the private torch APIs the npu backend is built on."""

from __future__ import annotations

import torch

REQUIRED_TORCH = "2.13"


class BackendUnavailableError(RuntimeError):
    """The installed torch lacks something the simulated npu backend needs."""


def _missing() -> list[str]:
    checks = {
        "torch._C._acc.create_empty_tensor": lambda: torch._C._acc.create_empty_tensor,
        "torch._C._acc.register_python_privateuseone_device_guard": (
            lambda: torch._C._acc.register_python_privateuseone_device_guard
        ),
        "torch._C._acc.register_python_privateuseone_hook": (
            lambda: torch._C._acc.register_python_privateuseone_hook
        ),
        "torch._C._acc.DeviceGuard": lambda: torch._C._acc.DeviceGuard,
        "torch._C._acc.PrivateUse1Hooks": lambda: torch._C._acc.PrivateUse1Hooks,
        "torch.utils.rename_privateuse1_backend": lambda: torch.utils.rename_privateuse1_backend,
        "torch._register_device_module": lambda: torch._register_device_module,
        "torch.library.Library.fallback": lambda: torch.library.Library.fallback,
        "torch._C._dispatch_has_kernel_for_dispatch_key": (
            lambda: torch._C._dispatch_has_kernel_for_dispatch_key
        ),
        "torch._C._dispatch_get_all_op_names": lambda: torch._C._dispatch_get_all_op_names,
        "torch.Tensor._reduce_ex_internal": lambda: torch.Tensor._reduce_ex_internal,
        "torch._utils._rebuild_device_tensor_from_cpu_tensor": (
            lambda: torch._utils._rebuild_device_tensor_from_cpu_tensor
        ),
        "torch.storage._to": lambda: torch.storage._to,
        "OpOverload.redispatch": lambda: torch.ops.aten.view.default.redispatch,
        "torch._C.DispatchKey.AutocastPrivateUse1": (
            lambda: torch._C.DispatchKey.AutocastPrivateUse1
        ),
    }
    missing = []
    for name, get in checks.items():
        try:
            get()
        except AttributeError:
            missing.append(name)
    return missing


def check_torch() -> None:
    """Raise :class:`BackendUnavailableError` unless this torch can host the npu backend."""
    version = torch.__version__.split("+")[0]
    if not version.startswith(REQUIRED_TORCH + "."):
        raise BackendUnavailableError(
            f"msprof-py's npu device needs torch {REQUIRED_TORCH}.*, found torch "
            f"{torch.__version__} (pip install -c constraints.txt 'torch=={REQUIRED_TORCH}.0')"
        )
    missing = _missing()
    if missing:
        raise BackendUnavailableError(
            f"torch {torch.__version__} lacks private APIs the npu backend needs "
            f"({', '.join(missing)}); msprof-py needs torch {REQUIRED_TORCH}.*"
        )
