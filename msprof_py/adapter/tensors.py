"""npu tensors and the host storage behind them.

An npu tensor is an ordinary ``torch.Tensor`` on device ``npu:0`` whose own storage holds no
bytes (``torch._C._acc.create_empty_tensor``). The values live in a *backing* storage — a CPU
storage with numerics ``cpu``, a meta storage with numerics ``none`` — that the npu storage
keeps for as long as it lives, so views, ``.data`` and ``detach`` share the backing bytes, and
the simulated device memory returns to the caching allocator when torch frees the storage.

An npu storage's state (:func:`backing_of`, :func:`memory_of`, :func:`storage_format`):
- its backing ``UntypedStorage``;
- the device memory it holds (the allocator's handle, returned when it dies; None in a graph's
  workspace);
- ``(format, logical shape)`` when the data is held in an NPU-private format (NC1HWC0,
  FRACTAL_Z ...); None for ND.

Where the compiled per-op path is built, the state lives in the storage's ``DataPtr`` context
(``hot_path.cpp``), which the compiled path reads and writes without a Python object per
storage, and the storage shows its device memory's address as its ``data_ptr()``. Without it,
the state is kept as attributes ``_npu``, ``_npu_mem`` and ``_npu_fmt`` of the storage's Python
object, which torch keeps alive exactly as long as the storage.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from msprof_py.adapter import runtime
from msprof_py.adapter.errors import raise_oom
from msprof_py.adapter.opcost import dtype_name
from msprof_py.adapter.runtime import AdapterState
from msprof_py.device import NpuOutOfMemoryError
from msprof_py.device.formats import storage_bytes

_META_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.Meta)
_create_empty = torch._C._acc.create_empty_tensor
_set_meta = torch.ops.aten.set_.source_Storage_storage_offset.redispatch
_META = torch.device("meta")
_CPU = torch.device("cpu")


#: device -> whether it is an npu device (``device.type`` builds a new string on every call)
_NPU_DEVICE: dict[torch.device, bool] = {}


def is_npu_device(device: torch.device) -> bool:
    """True for an npu device (cached per device object value)."""
    found = _NPU_DEVICE.get(device)
    if found is None:
        found = _NPU_DEVICE[device] = device.type == "npu"
    return found


def is_npu(value: object) -> bool:
    """True for a tensor on the npu device."""
    return isinstance(value, torch.Tensor) and is_npu_device(value.device)


def dense_non_overlapping(shape: Sequence[int], stride: Sequence[int]) -> bool:
    """Whether the elements fill a block of memory exactly once, in some dimension order."""
    expected = 1
    dims = sorted((st, sz) for sz, st in zip(shape, stride, strict=True) if sz != 1)
    for step, size in dims:
        if step != expected:
            return False
        expected *= size
    return True


#: an npu tensor or its storage: what the state functions take (a tensor where there is one:
#: with the compiled path, asking for ``untyped_storage()`` makes the storage a Python object,
#: which torch counts as a holder of the storage, so autograd would no longer accumulate a
#: gradient into it in place)
NpuStorage = torch.Tensor | torch.UntypedStorage


class _AttributeState:
    """An npu storage's state as attributes of its Python object (no compiled path)."""

    @staticmethod
    def _storage(obj: NpuStorage) -> torch.UntypedStorage:
        return obj.untyped_storage() if isinstance(obj, torch.Tensor) else obj

    def storage_backing(self, obj: NpuStorage) -> torch.UntypedStorage | None:
        return getattr(self._storage(obj), "_npu", None)

    def set_storage_backing(self, obj: NpuStorage, backing: torch.UntypedStorage) -> None:
        self._storage(obj)._npu = backing

    def storage_memory(self, obj: NpuStorage) -> Any:
        return getattr(self._storage(obj), "_npu_mem", None)

    def set_storage_memory(self, obj: NpuStorage, held: Any, nbytes: int = -1) -> None:
        self._storage(obj)._npu_mem = held

    def storage_format(self, obj: NpuStorage) -> tuple[str, tuple[int, ...]] | None:
        return getattr(self._storage(obj), "_npu_fmt", None)

    def set_storage_format(self, obj: NpuStorage, fmt: tuple[str, tuple[int, ...]] | None) -> None:
        storage = self._storage(obj)
        if fmt is not None:
            storage._npu_fmt = fmt
        elif hasattr(storage, "_npu_fmt"):
            del storage._npu_fmt


#: where npu storages keep their state: the compiled path's module (``DataPtr`` contexts) or
#: the storages' Python attributes
_STATE: Any = _AttributeState()


def use_compiled_state(module: Any | None) -> None:
    """Keep npu storages' state in the compiled path's ``module`` (None: as Python attributes).
    Chosen once, before the first npu tensor: a storage keeps its state where it was made."""
    global _STATE
    _STATE = _AttributeState() if module is None else module


def storages_show_their_bytes() -> bool:
    """Whether npu storages show a data pointer and their bytes, as torch_npu's do (their state
    kept by the compiled path); where it is not built they show neither."""
    return not isinstance(_STATE, _AttributeState)


def backing_of(obj: NpuStorage) -> torch.UntypedStorage | None:
    """The backing storage of npu tensor or storage ``obj`` (None: it has none)."""
    return _STATE.storage_backing(obj)


def memory_of(obj: NpuStorage) -> Any:
    """The device memory handle npu tensor or storage ``obj`` holds (None: none, or a graph's
    workspace)."""
    return _STATE.storage_memory(obj)


def backing_storage(t: torch.Tensor) -> torch.UntypedStorage:
    """The CPU (or meta) storage that holds ``t``'s values."""
    backing = _STATE.storage_backing(t)
    if backing is None:
        raise RuntimeError(
            "this npu tensor has no backing storage (was it created outside msprof-py?)"
        )
    return backing


#: (dtype, host device) -> an empty tensor whose ``new_empty`` starts a host view (cheaper than
#: ``torch.empty`` with a device argument)
_EMPTY_HOST: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}


def host_view(t: torch.Tensor) -> torch.Tensor:
    """A CPU (or meta) tensor aliasing ``t``'s values with ``t``'s sizes, strides and offset,
    and its conjugate and negative bits (``z.conj()`` is a lazy view: same bytes, one bit)."""
    storage = backing_storage(t)
    key = (t.dtype, storage.device)
    template = _EMPTY_HOST.get(key)
    if template is None:
        template = _EMPTY_HOST[key] = torch.empty(0, dtype=key[0], device=key[1])
    view = template.new_empty(0).set_(storage, t.storage_offset(), t.size(), t.stride())
    if t.is_conj():
        view = view._conj()
    if t.is_neg():
        view = view._neg_view()
    return view


def reserve(nbytes: int, state: AdapterState, tag: str) -> Any:
    """Device memory for a new storage of ``nbytes``: the allocator's handle, which frees it
    when it dies (None for 0 bytes; raises torch's OutOfMemoryError).

    The npu storage keeps the handle (:func:`memory_of`) as long as it lives, so the block
    returns to the caching allocator when torch frees the storage (in C with the compiled
    allocator core)."""
    try:
        return state.npu.memory.hold(nbytes, state.stream.stream_id, tag)
    except NpuOutOfMemoryError as exc:
        raise_oom(exc)


def hold_workspace(nbytes: int, state: AdapterState, tag: str) -> object | None:
    """Device memory of ``nbytes`` that no tensor shows (intermediates a kernel saves for its
    backward); held until the returned handle is dropped."""
    if nbytes <= 0 or state.capture is not None:  # in a graph: part of its workspace
        return None
    return reserve(nbytes, state, tag)


#: what ``held`` defaults to: no device memory reserved for the storage yet
_UNRESERVED: Any = object()


def _attach(
    npu: NpuStorage,
    backing: torch.UntypedStorage,
    state: AdapterState,
    tag: str,
    held: Any = _UNRESERVED,
) -> None:
    _hold_memory(npu, backing.nbytes(), state, tag, held)
    _STATE.set_storage_backing(npu, backing)


def _hold_memory(
    npu: NpuStorage,
    nbytes: int,
    state: AdapterState,
    tag: str,
    held: Any = _UNRESERVED,
) -> None:
    """Give ``npu``'s storage device memory for ``nbytes``, the size of its backing (``held``:
    the handle when already reserved), replacing what it held."""
    if held is _UNRESERVED:
        if state.capture is not None and _STATE.storage_memory(npu) is None:
            # a tensor created while a graph runs lives in the graph's workspace (or gets its
            # own memory when it leaves the graph: :func:`hold_own_memory`)
            _set_memory(npu, None, nbytes)
            return
        held = reserve(nbytes, state, tag)
    # replacing the handle frees the memory of a storage that was re-pointed or grown
    _set_memory(npu, held, nbytes)


def _set_memory(npu: NpuStorage, held: Any, nbytes: int = -1) -> None:
    """``npu``'s storage holds device memory ``held`` (a handle, or None in a graph's
    workspace); where the compiled path is built, the storage also shows that memory's address
    as its ``data_ptr()`` and its backing's size (``nbytes``, or looked up when -1) as its
    ``nbytes()``, as torch_npu's storages do (without it both stay 0)."""
    _STATE.set_storage_memory(npu, held, nbytes)


def adopt(
    result: torch.Tensor, state: AdapterState, tag: str, held: Any = _UNRESERVED
) -> torch.Tensor:
    """An npu tensor that takes over the values of the fresh host tensor ``result``.

    ``held`` is device memory already reserved for it (:func:`reserve`'s handle: factories
    reserve before allocating host memory, so a request the device cannot hold fails as an npu
    out-of-memory error).
    """
    if storages_show_their_bytes():  # the compiled path keeps the state: made as it makes it
        out = _STATE.adopt(result)
        _hold_memory(out, result.untyped_storage().nbytes(), state, tag, held)
        return out
    out = _create_empty(result.shape, result.dtype)
    _attach(out, result.untyped_storage(), state, tag, held)
    if result.storage_offset() or result.stride() != out.stride():
        _set_meta(
            _META_KEYS,
            out,
            out.untyped_storage(),
            result.storage_offset(),
            result.shape,
            result.stride(),
        )
    if result.is_conj():  # the bytes are the conjugate's: keep the lazy bit
        out = out._conj()
    if result.is_neg():
        out = out._neg_view()
    return out


def attach_memory(t: torch.Tensor, state: AdapterState, tag: str) -> None:
    """Device memory for new npu tensor ``t``, whose storage already holds its backing (made by
    the compiled per-op path, :mod:`msprof_py.adapter.native`)."""
    _hold_memory(t, backing_storage(t).nbytes(), state, tag)


def new_tensor(
    size: Sequence[int],
    stride: Sequence[int] | None,
    dtype: torch.dtype,
    state: AdapterState,
    tag: str,
) -> torch.Tensor:
    """A new, uninitialised npu tensor (``torch.empty`` on the device).

    Device memory is reserved first, so a request the simulated device cannot hold fails as an
    npu out-of-memory error before any host memory is touched.
    """
    if stride is None:
        stride = _contiguous_strides(size)
    numel = math.prod(size)
    elements = 0 if numel == 0 else 1 + sum((n - 1) * s for n, s in zip(size, stride, strict=True))
    in_graph = state.capture is not None  # the graph's workspace holds it
    held = _UNRESERVED if in_graph else reserve(elements * dtype.itemsize, state, tag)
    device = _META if state.meta else _CPU
    try:
        host = torch.empty_strided(size, stride, dtype=dtype, device=device)
    except BaseException:
        del held  # the memory returns now, not when the traceback is dropped
        raise
    return adopt(host, state, tag, held)


def _contiguous_strides(size: Sequence[int]) -> list[int]:
    strides, running = [], 1
    for n in reversed(size):
        strides.append(running)
        running *= max(n, 1)
    return strides[::-1]


def resync(t: torch.Tensor, view: torch.Tensor, state: AdapterState, tag: str) -> None:
    """After a host op resized or re-pointed ``view``, make npu tensor ``t`` match it."""
    same_meta = (
        t.shape == view.shape
        and t.stride() == view.stride()
        and t.storage_offset() == view.storage_offset()
    )
    backing = view.untyped_storage()
    old = _STATE.storage_backing(t)
    # a kernel that resizes its out= tensor grows the backing storage in place (the same
    # storage object, more bytes): the device memory must grow with it
    short = _holds_less(t, backing.nbytes(), state)
    if same_meta and old is backing and not short:
        return
    if old is not backing or short:
        _attach(t, backing, state, tag)
    _set_meta(_META_KEYS, t, t.untyped_storage(), view.storage_offset(), view.shape, view.stride())


def resize_storage_bytes(storage: torch.UntypedStorage, nbytes: int) -> None:
    """``storage.resize_(nbytes)`` for an npu storage (torch asks the device's hooks, as it
    asks torch_npu's): its backing resized as CPU resizes a storage (the first bytes kept),
    then device memory for the new size in place of the old (none for 0 bytes: FSDP frees a
    parameter's storage so and grows it back before its next use)."""
    backing = backing_of(storage)
    if backing is None:
        raise RuntimeError(
            "resize_: the npu storage holds no values (it was not made by msprof-py)"
        )
    backing.resize_(nbytes)
    _hold_memory(storage, nbytes, runtime.state(), "resize_")  # 0 bytes: no handle
    _STATE.set_storage_backing(storage, backing)  # host views made for the old bytes go


def set_to_storage(
    t: torch.Tensor,
    source: torch.UntypedStorage,
    storage_offset: int,
    size: Sequence[int] | None,
    stride: Sequence[int],
    state: AdapterState,
) -> torch.Tensor:
    """``t.set_(source, storage_offset, size, stride)`` for npu tensor ``t`` and npu storage
    ``source`` (``size`` None: all of the storage's elements, one dimension), as CPU's ``set_``
    does it: the geometry checked and the storage grown to hold it on the backing, then ``t``
    made a view of ``source``, holding device memory for the backing's bytes. (A CPU kernel
    cannot take the npu storage itself.)"""
    backing = backing_of(source)
    if backing is None:
        raise RuntimeError("set_: the npu storage holds no values (it was not made by msprof-py)")
    host = torch.empty(0, dtype=t.dtype, device=backing.device)  # meta with numerics "none"
    if size is None:
        host.set_(backing)
    else:
        host.set_(backing, storage_offset, size, stride)
    _set_meta(_META_KEYS, t, source, host.storage_offset(), host.shape, host.stride())
    hold_device_bytes(t, backing.nbytes(), state, "aten::set_")
    return t


def _holds_less(t: torch.Tensor, nbytes: int, state: AdapterState) -> bool:
    """Whether ``t``'s storage holds less device memory than ``nbytes`` (none at all, outside a
    graph's workspace, counts as less for any bytes)."""
    held = _STATE.storage_memory(t)
    if held is None:
        return nbytes > 0 and state.capture is None
    return state.npu.memory.block_size(held.address) < nbytes


def storage_format(t: torch.Tensor) -> tuple[str, tuple[int, ...]] | None:
    """``(format, logical shape)`` of ``t``'s data when held in a private format, else None."""
    return _STATE.storage_format(t)


def hold_device_bytes(t: torch.Tensor, nbytes: int, state: AdapterState, tag: str) -> None:
    """Make ``t``'s storage hold at least ``nbytes`` of device memory (a padded private format
    takes more than the logical bytes)."""
    if _holds_less(t, nbytes, state):  # (never in a graph's workspace)
        _set_memory(t, reserve(nbytes, state, tag))


def hold_own_memory(t: torch.Tensor, state: AdapterState, tag: str) -> None:
    """Give ``t``'s storage device memory of its own if it has none (a tensor created in a
    graph's workspace that outlives the graph call); its padded size if held in a private
    format."""
    backing = _STATE.storage_backing(t)
    if backing is None or _STATE.storage_memory(t) is not None:
        return
    nbytes = backing.nbytes()
    fmt = _STATE.storage_format(t)
    if fmt is not None:
        nbytes = max(nbytes, storage_bytes(fmt[1], dtype_name(t.dtype), fmt[0]))
    if nbytes > 0:
        _set_memory(t, reserve(nbytes, state, tag))


def set_storage_format(t: torch.Tensor, fmt: str | None, shape: tuple[int, ...] = ()) -> None:
    """Tag ``t``'s storage as held in ``fmt`` (None or ``"ND"``: the plain layout)."""
    plain = fmt is None or fmt == "ND"
    _STATE.set_storage_format(t, None if plain else (fmt, shape))
