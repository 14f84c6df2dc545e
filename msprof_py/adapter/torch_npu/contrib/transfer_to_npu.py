"""``import torch_npu.contrib.transfer_to_npu``: run a script written for CUDA on npu unchanged.

Importing this module (once) patches torch so that CUDA spellings mean npu: ``"cuda"`` device
strings and ``torch.device("cuda")`` become ``npu``, ``.cuda()`` moves to npu, ``torch.cuda.*``
answers for the npu device (streams, events, memory, synchronize, ``torch.cuda.amp``),
``torch.autocast("cuda")`` and ``torch.amp.GradScaler("cuda")`` use npu, and
``init_process_group(backend="nccl")`` uses ``hccl``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

import msprof_py.adapter.npu_amp as npu_amp
import msprof_py.adapter.npu_module as npu_module

_ORIGINAL_DEVICE = torch.device


def _to_npu(value: Any) -> Any:
    """Map a CUDA device spelling to npu; leave anything else alone."""
    if isinstance(value, str) and value.startswith("cuda"):
        return "npu" + value[4:]
    if isinstance(value, _ORIGINAL_DEVICE) and value.type == "cuda":
        return _ORIGINAL_DEVICE("npu", value.index)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return value


class _DeviceMeta(type):
    def __instancecheck__(cls, instance: object) -> bool:
        return isinstance(instance, _ORIGINAL_DEVICE)


class _Device(metaclass=_DeviceMeta):
    """``torch.device`` that reads ``"cuda"`` as ``"npu"`` (instances are real torch.device)."""

    def __new__(cls, *args: Any, **kwargs: Any) -> torch.device:  # type: ignore[misc]
        if args:
            args = (_to_npu(args[0]), *args[1:])
        if "type" in kwargs:
            kwargs["type"] = _to_npu(kwargs["type"])
        return _ORIGINAL_DEVICE(*args, **kwargs)


def _wrap_device_kwarg(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if "device" in kwargs:
            kwargs["device"] = _to_npu(kwargs["device"])
        return fn(*args, **kwargs)

    return wrapped


def _wrap_to(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def to(self: Any, *args: Any, **kwargs: Any) -> Any:
        if args:
            args = (_to_npu(args[0]), *args[1:])
        if "device" in kwargs:
            kwargs["device"] = _to_npu(kwargs["device"])
        return fn(self, *args, **kwargs)

    return to


_FACTORIES = (
    "tensor",
    "as_tensor",
    "zeros",
    "ones",
    "empty",
    "full",
    "rand",
    "randn",
    "randint",
    "randperm",
    "arange",
    "linspace",
    "logspace",
    "eye",
    "zeros_like",
    "ones_like",
    "empty_like",
    "full_like",
    "rand_like",
    "randn_like",
    "randint_like",
    "empty_strided",
    "normal",
    "from_numpy",
    "scalar_tensor",
    "tril_indices",
    "triu_indices",
)
_TENSOR_METHODS = ("new_empty", "new_zeros", "new_ones", "new_full", "new_tensor")


def _patch_devices() -> None:
    torch.device = _Device  # type: ignore[misc,assignment]
    for name in _FACTORIES:
        fn = getattr(torch, name, None)
        if fn is not None:
            setattr(torch, name, _wrap_device_kwarg(fn))
    for name in _TENSOR_METHODS:
        setattr(torch.Tensor, name, _wrap_device_kwarg(getattr(torch.Tensor, name)))
    torch.Tensor.to = _wrap_to(torch.Tensor.to)  # type: ignore[method-assign]
    torch.nn.Module.to = _wrap_to(torch.nn.Module.to)  # type: ignore[method-assign]

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
    for name in npu_module.__all__:
        setattr(torch.cuda, name, getattr(npu_module, name))
    for name in (
        "is_initialized",
        "init",
        "_lazy_init",
        "seed",
        "seed_all",
        "initial_seed",
        "get_rng_state",
        "set_rng_state",
        "reset_max_memory_allocated",
        "get_amp_supported_dtype",
    ):
        setattr(torch.cuda, name, getattr(npu_module, name))
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


_patch_devices()
_patch_cuda_module()
_patch_amp()
_patch_distributed()
