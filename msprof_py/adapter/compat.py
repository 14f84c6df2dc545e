"""Small patches that make torch's generic code work with the Python npu backend.

- ``torch.save`` of npu tensors: torch's own way where the compiled path keeps the storages'
  state (their storages saved once each, tagged ``npu:0``), else through a CPU copy of each
  tensor, reloaded onto npu.
- ``torch.UntypedStorage(..., device="npu")``, ``storage.to("npu")`` and so ``torch.load(...,
  map_location="npu")``: torch would make the npu storage with the device's registered
  allocator, which the Python backend has none of (a crash); it is made as an npu tensor's
  storage instead, and tensors are rebuilt on it by the npu ``set_`` kernel. An npu storage's
  ``.cpu()`` and ``.new()`` go the same way.
- ``torch.accelerator`` functions the Python backend cannot serve natively (synchronize, memory
  statistics) are forwarded to ``torch.npu``.
- The DataLoader's pin-memory thread calls ``torch.set_num_threads(1)`` for itself, but the
  setting is process-wide: on a real device that only slows CPU work, on the simulated one the
  host computes every npu op, and fewer intra-op threads change reduction orders (results differ
  from CPU by an ulp). That call is ignored, so npu ops run with the threads the script has.
- ``torch.Generator(device="npu")`` (see :mod:`msprof_py.adapter.generators`).
- ``copy.deepcopy`` of an npu tensor (a module's buffers, ``timm``'s model EMA): torch copies
  the storage's bytes, which the Python backend's storages do not hold; an npu tensor is
  deep-copied by ``clone`` instead (as torch does for storage-less PrivateUse1 tensors), with
  its ``requires_grad``, gradient and Python attributes. Tensors sharing one storage come out
  as separate copies.
- ``torch.compile``'s default backend (inductor) cannot lower npu graphs; for graphs with npu
  inputs it is replaced by the ``"npu"`` graph-mode backend (:mod:`msprof_py.graph.backend`).
- The ``"npu"`` backend is registered with Dynamo's registry as soon as Dynamo's registry
  module loads (installing the adapter does not import Dynamo, which takes seconds).
"""

from __future__ import annotations

import copy
import functools
import importlib.abc
import importlib.util
import sys
from collections.abc import Callable
from typing import Any

import torch

from msprof_py.adapter import tensors


def _patch_save() -> None:
    original = torch.Tensor._reduce_ex_internal

    @functools.wraps(original)
    def reduce_ex_internal(self: torch.Tensor, proto: int) -> Any:
        # with the compiled path, torch's own way (storages tagged "npu:0" as torch_npu's, one
        # per storage shared by views and tied weights), restored by storage.to("npu") and
        # set_ below; without it the storages show no bytes to write
        if self.device.type == "npu" and not tensors.storages_show_their_bytes():
            rebuild = torch._utils._rebuild_device_tensor_from_cpu_tensor
            values = self.detach().cpu()  # a leaf: the rebuilt tensor takes requires_grad
            return rebuild, (values, self.dtype, str(self.device), self.requires_grad)
        return original(self, proto)

    torch.Tensor._reduce_ex_internal = reduce_ex_internal  # type: ignore[method-assign]


def _bytes_of(storage: torch.UntypedStorage) -> torch.Tensor:
    """A one-dimensional byte tensor over all of ``storage``, on its device."""
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)


def npu_storage(source: torch.UntypedStorage, device: Any) -> torch.UntypedStorage:
    """An npu storage holding a copy of ``source``'s bytes. Torch makes a device's storage with
    the allocator registered for the device, which a Python backend has none of (torch would
    call through a null allocator and crash); here it is the storage of an npu byte tensor."""
    target = torch.empty(source.nbytes(), dtype=torch.uint8, device=device)
    target.copy_(_bytes_of(source))
    return target.untyped_storage()


def _patch_storage_to() -> None:
    """``storage.to("npu")``, and so ``torch.load(..., map_location="npu")``, which restores
    each storage with it (then rebuilds the tensors on it with ``set_``); npu storages made
    with ``torch.UntypedStorage``."""
    original = torch.storage._to

    @functools.wraps(original)
    def to(self: Any, device: Any, non_blocking: bool = False) -> Any:
        target = torch.device(device)
        if target.type == "npu" and self.device.type != "npu":
            return npu_storage(self, target)
        if target.type == "cpu" and self.device.type == "npu":
            return self.cpu()
        return original(self, device, non_blocking)

    torch.storage._to = to

    # torch.UntypedStorage(..., device="npu") (and TypedStorage, which makes one): made on CPU,
    # then copied to an npu storage
    make = torch.UntypedStorage.__new__

    def new(cls: type, *args: Any, **kwargs: Any) -> Any:
        device = kwargs.get("device")
        if device is not None and torch.device(device).type == "npu":
            on_cpu = {key: value for key, value in kwargs.items() if key != "device"}
            return npu_storage(make(cls, *args, **on_cpu), device)
        return make(cls, *args, **kwargs)

    torch.UntypedStorage.__new__ = new  # type: ignore[method-assign]

    # an npu storage's CPU copy: torch copies the storage's own bytes, which a Python backend's
    # storage does not hold (its size shows 0 where the compiled path is not built)
    cpu = torch.UntypedStorage.cpu

    def to_cpu(self: Any) -> Any:
        if self.device.type == "npu":
            return _bytes_of(self).cpu().untyped_storage()
        return cpu(self)

    torch.UntypedStorage.cpu = to_cpu  # type: ignore[method-assign]

    # storage.new(): an empty storage on the same device (torch's made one with the allocator
    # of the npu storage's Python backend, a meta storage)
    original_new = torch.UntypedStorage.new

    def new_empty(self: Any) -> Any:
        if self.device.type == "npu":
            return torch.UntypedStorage(0, device=self.device)
        return original_new(self)

    torch.UntypedStorage.new = new_empty  # type: ignore[method-assign]


_ACCELERATOR_FORWARDS = {
    "synchronize": "synchronize",
    "memory_allocated": "memory_allocated",
    "max_memory_allocated": "max_memory_allocated",
    "memory_reserved": "memory_reserved",
    "max_memory_reserved": "max_memory_reserved",
    "memory_stats": "memory_stats",
    "reset_peak_memory_stats": "reset_peak_memory_stats",
    "empty_cache": "empty_cache",
    "get_memory_info": "mem_get_info",
}


def _forward(original: Callable[..., Any], target: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def forwarded(device: Any = None, *args: Any, **kwargs: Any) -> Any:
        on_npu = device is None or torch.device(device).type == "npu"
        if on_npu and torch.accelerator.current_accelerator().type == "npu":
            return target(*args, **kwargs) if device is None else target(device, *args, **kwargs)
        return original(device, *args, **kwargs)

    return forwarded


def _patch_accelerator(npu_module: Any) -> None:
    for name, target in _ACCELERATOR_FORWARDS.items():
        original = getattr(torch.accelerator, name, None)
        if original is not None:
            setattr(torch.accelerator, name, _forward(original, getattr(npu_module, target)))
        memory = getattr(torch.accelerator, "memory", None)
        if memory is not None and getattr(memory, name, None) is not None:
            setattr(memory, name, _forward(getattr(memory, name), getattr(npu_module, target)))


def _patch_deepcopy() -> None:
    original = torch.Tensor.__deepcopy__

    @functools.wraps(original)
    def deepcopy(self: torch.Tensor, memo: dict[int, Any]) -> torch.Tensor:
        if type(self) is not torch.Tensor or self.device.type != "npu" or not self.is_leaf:
            return original(self, memo)
        if id(self) in memo:
            return memo[id(self)]
        with torch.no_grad():
            new = self.clone(memory_format=torch.preserve_format)
        new.requires_grad_(self.requires_grad)
        memo[id(self)] = new
        if self.grad is not None:
            new.grad = copy.deepcopy(self.grad, memo)
        if self.__dict__:
            new.__dict__ = copy.deepcopy(self.__dict__, memo)
        return new

    torch.Tensor.__deepcopy__ = deepcopy  # type: ignore[method-assign]


def _patch_pin_memory_threads() -> None:
    original = torch.set_num_threads

    @functools.wraps(original)
    def set_num_threads(num: int) -> None:
        caller = sys._getframe(1).f_code
        if caller.co_name == "_pin_memory_loop" and "torch/utils/data" in caller.co_filename:
            return
        original(num)

    torch.set_num_threads = set_num_threads


def _has_npu_input(example_inputs: Any) -> bool:
    return any(isinstance(t, torch.Tensor) and t.device.type == "npu" for t in example_inputs)


def _npu_aware_inductor(gm: torch.fx.GraphModule, example_inputs: Any, **kwargs: Any) -> Any:
    """Inductor for CPU graphs, the ``"npu"`` backend for graphs with npu inputs (with
    ``torch.compile``'s ``mode``: "reduce-overhead" or, for any other, "max-autotune")."""
    from torch._dynamo.backends.registry import lookup_backend

    if not _has_npu_input(example_inputs):
        return lookup_backend("inductor")(gm, example_inputs)
    from msprof_py.graph.backend import npu_backend

    mode = "reduce-overhead" if kwargs.get("mode") == "reduce-overhead" else "max-autotune"
    return npu_backend(gm, example_inputs, mode=mode)


def npu(gm: torch.fx.GraphModule, example_inputs: Any, **kwargs: Any) -> Any:
    """The ``"npu"`` backend as registered (imports graph mode on first use)."""
    from msprof_py.graph.backend import npu_backend

    return npu_backend(gm, example_inputs, **kwargs)


_REGISTRY = "torch._dynamo.backends.registry"


def _register_npu_backend(registry: Any) -> None:
    if "npu" not in registry._COMPILER_FNS:
        registry.register_backend(npu, name="npu")


class _RegisterOnLoad(importlib.abc.MetaPathFinder):
    """Registers the ``"npu"`` backend right after Dynamo's registry module has run."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != _REGISTRY:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module: Any) -> None:
            original(module)
            _register_npu_backend(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _register_backend() -> None:
    registry = sys.modules.get(_REGISTRY)
    if registry is not None:
        _register_npu_backend(registry)
    elif not any(isinstance(f, _RegisterOnLoad) for f in sys.meta_path):
        sys.meta_path.insert(0, _RegisterOnLoad())


def _patch_compile() -> None:
    original = torch.compile

    @functools.wraps(original)
    def compile(model: Any = None, *, backend: Any = "inductor", **kwargs: Any) -> Any:
        if backend == "inductor":
            backend = _npu_aware_inductor
        if model is None:
            return original(backend=backend, **kwargs)
        return original(model, backend=backend, **kwargs)

    torch.compile = compile  # type: ignore[assignment]


def apply(npu_module: Any) -> None:
    """Apply every patch (once per process)."""
    from msprof_py.adapter import generators, module_conversion

    module_conversion.install()
    generators.install()
    _patch_save()
    _patch_storage_to()
    _patch_deepcopy()
    _patch_pin_memory_threads()
    _patch_accelerator(npu_module)
    _patch_compile()
    _register_backend()
