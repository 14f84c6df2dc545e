"""``import torch_npu.contrib.transfer_to_npu``: run a script written for CUDA on npu unchanged.

Importing this module (once) patches torch the way torch_npu's transfer_to_npu does: the
functions and methods that take a device (tensor factories, ``Tensor.to``/``new_*``,
``Module.to``/``to_empty``, ``torch.load(map_location=)``, ``torch.set_default_device``, the
``with torch.device("cuda"):`` context, ``DistributedDataParallel(device_ids=)``) read a CUDA
device as the npu device; ``.cuda()`` moves to npu and ``.is_cuda`` is true for npu tensors;
``torch.cuda.*`` is ``torch.npu.*`` (streams, events, memory, RNG, ``is_bf16_supported``,
``get_device_capability``, ``torch.cuda.amp``, ``torch.cuda.random``); ``torch.autocast("cuda")``
and ``torch.amp.GradScaler("cuda")`` use npu; ``init_process_group(backend="nccl")`` uses hccl;
triton counts as absent. ``torch.device`` itself stays torch's class (``torch.device("cuda")``
is still a CUDA device object, as with torch_npu), so generated code (FX, torch.compile) that
names it keeps working.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.utils._device

import msprof_py.adapter.npu_amp as npu_amp
import msprof_py.adapter.npu_module as npu_module
import msprof_py.adapter.npu_random as npu_random

#: keyword arguments that name a device
_DEVICE_KWARGS = ("device", "device_type", "map_location", "device_id", "output_device")


def _to_npu(value: Any, ints: bool = False) -> Any:
    """Map a CUDA device spelling (or, with ``ints``, a bare index) to npu."""
    if isinstance(value, str) and value.startswith("cuda"):
        return "npu" + value[4:]
    if isinstance(value, torch.device) and value.type == "cuda":
        return torch.device("npu", value.index)
    if ints and isinstance(value, int) and not isinstance(value, bool):
        return f"npu:{value}"
    if isinstance(value, dict):
        return {_to_npu(k): _to_npu(v) for k, v in value.items()}
    return value


def _wrap_cuda_args(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` reading CUDA devices in its arguments as npu (bare ints too for ``to``)."""
    ints = fn.__name__ in ("to", "to_empty")

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        args = tuple(_to_npu(a, ints) for a in args)
        for name in _DEVICE_KWARGS:
            if kwargs.get(name) is not None:
                kwargs[name] = _to_npu(kwargs[name])
        if isinstance(kwargs.get("device_ids"), list):
            kwargs["device_ids"] = [_to_npu(d) for d in kwargs["device_ids"]]
        return fn(*args, **kwargs)

    return wrapped


#: torch functions with a device argument (torch_npu's list, less the quantized and sparse ones)
_TORCH_FUNCTIONS = (
    "arange", "as_tensor", "autocast", "bartlett_window", "blackman_window", "empty",
    "empty_like", "empty_strided", "eye", "frombuffer", "full", "full_like", "hamming_window",
    "hann_window", "kaiser_window", "linspace", "load", "logspace", "normal", "ones",
    "ones_like", "rand", "rand_like", "randint", "randint_like", "randn", "randn_like",
    "randperm", "range", "scalar_tensor", "set_default_device", "tensor", "tril_indices",
    "triu_indices", "zeros", "zeros_like", "from_numpy",
)  # fmt: skip
_TENSOR_METHODS = (
    "new_empty", "new_empty_strided", "new_full", "new_ones", "new_tensor", "new_zeros", "to",
)  # fmt: skip
_MODULE_METHODS = ("to", "to_empty")


def _wrap_all(owner: Any, names: tuple[str, ...]) -> None:
    for name in names:
        fn = getattr(owner, name, None)
        if fn is not None:
            setattr(owner, name, _wrap_cuda_args(fn))


def _patch_devices() -> None:
    # ``with torch.device(...)`` matches calls against this cached set: fill it with the
    # original factories before they are wrapped (the wrappers call the originals)
    torch.utils._device._device_constructors()
    _wrap_all(torch, _TORCH_FUNCTIONS)
    _wrap_all(torch.Tensor, _TENSOR_METHODS)
    _wrap_all(torch.nn.Module, _MODULE_METHODS)
    context = torch.utils._device.DeviceContext
    context.__init__ = _wrap_cuda_args(context.__init__)  # type: ignore[method-assign]
    ddp = torch.nn.parallel.DistributedDataParallel
    ddp.__init__ = _wrap_cuda_args(ddp.__init__)  # type: ignore[method-assign]

    def tensor_cuda(
        self: torch.Tensor, device: Any = None, non_blocking: bool = False, **kwargs: Any
    ) -> torch.Tensor:
        return self.to("npu", non_blocking=non_blocking)

    def module_cuda(self: torch.nn.Module, device: Any = None) -> torch.nn.Module:
        return self.to("npu")

    torch.Tensor.cuda = tensor_cuda  # type: ignore[method-assign,assignment]
    torch.nn.Module.cuda = module_cuda  # type: ignore[method-assign,assignment]
    torch.Tensor.is_cuda = property(lambda self: self.device.type == "npu")  # type: ignore[assignment]


def _patch_cuda_module() -> None:
    for name in (*npu_module.__all__, "_lazy_init"):
        setattr(torch.cuda, name, getattr(npu_module, name))
    torch.cuda.random = npu_random  # type: ignore[attr-defined]
    torch.cuda.amp.autocast = npu_amp.autocast  # type: ignore[misc]
    torch.cuda.amp.GradScaler = npu_amp.GradScaler  # type: ignore[misc]


def _patch_amp() -> None:
    autocast_init = torch.amp.autocast.__init__

    @functools.wraps(autocast_init)
    def init(self: Any, device_type: str, *args: Any, **kwargs: Any) -> None:
        autocast_init(self, "npu" if device_type == "cuda" else device_type, *args, **kwargs)

    torch.amp.autocast.__init__ = init  # type: ignore[method-assign]
    scaler_init = torch.amp.GradScaler.__init__

    @functools.wraps(scaler_init)
    def scaler(self: Any, device: str = "cuda", *args: Any, **kwargs: Any) -> None:
        scaler_init(self, "npu" if device == "cuda" else device, *args, **kwargs)

    torch.amp.GradScaler.__init__ = scaler  # type: ignore[method-assign]


def _patch_distributed() -> None:
    import torch.distributed as dist

    original = dist.init_process_group

    @functools.wraps(original)
    def init_process_group(backend: str | None = None, *args: Any, **kwargs: Any) -> None:
        if backend == "nccl":
            backend = "hccl"
        return original(backend, *args, **kwargs)

    dist.init_process_group = init_process_group
    dist.is_nccl_available = lambda: True  # "nccl" means hccl, which is there


def _patch_triton() -> None:
    """Triton cannot target the npu device: tell torch it is absent, as torch_npu does."""
    import torch.utils._triton as triton_utils

    triton_utils.has_triton = lambda: False  # type: ignore[assignment]


_patch_devices()
_patch_cuda_module()
_patch_amp()
_patch_distributed()
_patch_triton()
