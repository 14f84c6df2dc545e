"""Shapes only: an op's meta result remembered per (op, argument metadata).

With ``numerics="none"`` every op runs its meta kernel on meta host views, and many of those
kernels are PyTorch's Python references (``torch._refs``, ``_meta_registrations``): tens to
hundreds of µs per op, and for a ``_foreach_*`` op over a model's parameters one reference per
tensor. A training loop repeats the same ops on the same shapes, and a meta kernel's result
depends on nothing but its arguments' metadata, so the first call's outcome is kept and later
calls with the same key rebuild it:

- the key: the op, and per argument its metadata: a meta tensor's sizes, strides, storage
  offset, dtype and which earlier tensor argument shares its storage (aliasing); a number,
  ``None``, string, dtype, layout, memory format or device by type and value; lists and
  tuples element by element. Anything else (a CPU tensor, whose values a kernel may read; a
  generator, a symbolic size ...) is not cached;
- what is kept: the result as fresh tensors (sizes, strides, dtype, each on a storage of its
  own and exactly as large as they need), arguments returned as themselves (in-place ops), or
  ``None``. A call whose written arguments changed metadata (an ``out=`` resized), whose
  result shares storage with an argument, carries conjugate or negative bits, or has any
  other kind of value is not kept: it runs its meta kernel every time;
- a call that raises is never kept (the next one raises again, from the kernel).

The cache is bounded (cleared when full). Dispatch modes on the stack and CPU autocast turn it
off for the call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["CACHE_LIMIT", "MetaCache"]

#: entries kept before the cache starts over
CACHE_LIMIT = 20_000

_META = torch.device("meta")
_SCALARS = (bool, int, float, str, torch.dtype, torch.layout, torch.memory_format, torch.device)
_size = torch._C.TensorBase.size
_stride = torch._C.TensorBase.stride
_offset = torch._C.TensorBase.storage_offset
_storage = torch._C.TensorBase.untyped_storage
_dispatch_modes = torch._C._len_torch_dispatch_stack
_autocast_enabled = torch.is_autocast_enabled


class _Uncacheable(Exception):
    """An argument or result the cache cannot describe."""


class _Keyer:
    """Builds the metadata key of one call's arguments (and remembers its tensors)."""

    __slots__ = ("storages", "tensors")

    def __init__(self) -> None:
        self.tensors: list[torch.Tensor] = []
        #: storage pointer -> index of the first tensor argument on it
        self.storages: dict[int, int] = {}

    def key(self, v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            # a CPU tensor beside meta views (an index) has values a kernel may read
            if v.device != _META or v.is_conj() or v.is_neg():
                raise _Uncacheable
            index = len(self.tensors)
            self.tensors.append(v)
            alias = self.storages.setdefault(_storage(v)._cdata, index)
            return (_size(v), _stride(v), _offset(v), v.dtype, alias)
        if v is None or isinstance(v, _SCALARS):
            return (type(v), v)
        if isinstance(v, (list, tuple)):
            return (type(v), *[self.key(x) for x in v])
        raise _Uncacheable


class _Fresh:
    """A fresh result tensor's description."""

    __slots__ = ("dtype", "size", "stride")

    def __init__(self, t: torch.Tensor) -> None:
        self.size = tuple(t.size())
        self.stride = tuple(t.stride())
        self.dtype = t.dtype

    def make(self) -> torch.Tensor:
        return torch.empty_strided(self.size, self.stride, dtype=self.dtype, device=_META)


class _Arg:
    """A result that is the call's ``index``-th tensor argument itself."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


def _describe(result: Any, tensors: list[torch.Tensor], storages: dict[int, int]) -> Any:
    """How to rebuild ``result`` (raises :class:`_Uncacheable`). ``storages`` holds the
    arguments' storages, and gets each fresh result's: no two may share one."""
    if result is None:
        return None
    if isinstance(result, torch.Tensor):
        for i, t in enumerate(tensors):
            if result is t:
                return _Arg(i)
        if result.device != _META or result.is_conj() or result.is_neg():
            raise _Uncacheable
        storage = _storage(result)
        if storage._cdata in storages or _offset(result) != 0:
            raise _Uncacheable
        storages[storage._cdata] = -1
        fresh = _Fresh(result)
        if fresh.make().untyped_storage().nbytes() != storage.nbytes():
            raise _Uncacheable
        return fresh
    if isinstance(result, (list, tuple)):
        return (type(result), [_describe(r, tensors, storages) for r in result])
    raise _Uncacheable


def _rebuild(recipe: Any, tensors: list[torch.Tensor]) -> Any:
    if recipe is None:
        return None
    if isinstance(recipe, _Fresh):
        return recipe.make()
    if isinstance(recipe, _Arg):
        return tensors[recipe.index]
    kind, parts = recipe
    return kind([_rebuild(p, tensors) for p in parts])


def _metadata(tensors: list[torch.Tensor]) -> list[tuple]:
    return [(_size(t), _stride(t), _offset(t), t.dtype) for t in tensors]


#: a key whose call cannot be kept: its meta kernel runs every time
_NOT_KEPT = object()


class MetaCache:
    """Meta results by (op, argument metadata); see the module docstring."""

    def __init__(self, limit: int = CACHE_LIMIT) -> None:
        self.limit = limit
        #: False: every call runs its meta kernel (for comparisons)
        self.enabled = True
        self._entries: dict[tuple, Any] = {}
        #: calls answered from the cache, and calls that ran their meta kernel
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def call(self, op: object, call: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        """``call(*args, **kwargs)`` on meta host views, or its kept result for the same
        metadata."""
        if not self.enabled or _dispatch_modes() or _autocast_enabled("cpu"):
            return call(*args, **kwargs)
        keyer = _Keyer()
        try:
            key = (op, *[keyer.key(a) for a in args])
            if kwargs:
                key += tuple([(name, keyer.key(kwargs[name])) for name in sorted(kwargs)])
        except _Uncacheable:
            return call(*args, **kwargs)
        recipe = self._entries.get(key)
        if recipe is not None and recipe is not _NOT_KEPT:
            self.hits += 1
            return _rebuild(recipe[0], keyer.tensors)
        self.misses += 1
        if recipe is _NOT_KEPT:
            return call(*args, **kwargs)
        before = _metadata(keyer.tensors)
        result = call(*args, **kwargs)  # raises: nothing kept
        try:
            if _metadata(keyer.tensors) != before:  # an out= or in-place argument changed
                raise _Uncacheable
            kept: Any = (_describe(result, keyer.tensors, keyer.storages),)
        except _Uncacheable:
            kept = _NOT_KEPT
        if len(self._entries) >= self.limit:
            self._entries.clear()
        self._entries[key] = kept
        return result
