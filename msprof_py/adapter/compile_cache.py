"""The op compile cache: what the host pays the first time an op meets a new key.

CANN builds an op's kernel per key - the op, its tensors' shapes, dtypes and formats, and its
attributes. ``torch_npu.npu.set_compile_mode(jit_compile=...)`` chooses how:

* ``jit_compile=True`` (the default on 910A and the inference chips): each new key is compiled
  online on the host (``compile.online_compile_us`` of the device spec, per kernel, [U]); the
  kernel is built for exactly those shapes, so its ``OP State`` is ``static``. A loop whose
  shapes change (variable sequence lengths, a shrinking batch) compiles again and again.
* ``jit_compile=False`` (the default on Atlas A2/A3): prebuilt binary kernels for any shape; a
  new key costs only host tiling (``compile.tiling_us``, [U]: ``aclnnXxxGetWorkspaceSize`` runs
  shape inference and tiling; for a known key that work is inside ``dispatch.stage2``, the
  two-phase ``GetWorkspaceSize`` + launch of every call). The kernel's ``OP State`` is
  ``dynamic``.

The cost is a host span on the launching thread (``compile <OpType>`` or ``tiling <OpType>``,
an API record the exports show and :mod:`msprof_py.analyzers.dynamic` reads), charged before
the launch. Attributes are the op's non-tensor arguments that select a kernel (integers,
booleans, strings, dtypes, integer lists: dims, sizes, groups); floating-point scalars are
runtime values (torch_npu hands them over as host scalars), so a learning rate that changes
every step compiles nothing [U]. Kernels captured into a graph are compiled with the graph
(:mod:`msprof_py.graph`), not here.

The cache costs one set lookup per launch (the backend asks it only once per kernel-cost entry
and attribute tuple, see :attr:`CompileCache.epoch`); it lives with the device for the whole
process, as the in-memory op cache of a torch_npu process does, and each in-process recording
(``msprof_py.record``) starts with it empty, as a fresh process. Across runs, ACL's on-disk
cache (:mod:`msprof_py.adapter.op_disk_cache`, when ``ACL_OP_COMPILER_CACHE_DIR`` names a
folder) spares jit mode the online compile of a key an earlier run compiled. Past
``KEY_LIMIT`` keys it is emptied (memory safety only: a run that far is compiling anyway).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from msprof_py.adapter.op_disk_cache import DiskCache
from msprof_py.device.engine import Engine
from msprof_py.device.spec import CompileSpec

#: task attributes of a kernel by compile mode (shared dicts: nothing allocated per launch)
STATIC_ATTRS: dict[str, object] = {"op_state": "static"}
DYNAMIC_ATTRS: dict[str, object] = {"op_state": "dynamic"}
#: host-span name prefixes of an online compile and of a binary kernel's tiling
COMPILE_PREFIX = "compile "
TILING_PREFIX = "tiling "

_ATTR_TYPES = (bool, int, str, torch.dtype, type(None))
#: keys kept before the cache is emptied
KEY_LIMIT = 1_000_000
#: epochs of every cache in the process (an epoch names one cache's key set between clears)
_EPOCHS = itertools.count(1)
_TENSOR = torch.Tensor


@dataclass(frozen=True)
class CacheStats:
    """What the cache did since it was created or cleared."""

    jit_compile: bool
    #: distinct keys seen
    keys: int
    #: online compiles (jit mode) and tilings of new keys (binary mode), per kernel
    compiles: int
    tilings: int
    #: host time they cost
    compile_ns: int
    tiling_ns: int
    #: keys the on-disk cache held (jit mode: no online compile)
    disk_hits: int = 0


class CompileCache:
    """The keys the host has built kernels for, the compile mode and the host time charged."""

    __slots__ = (
        "attrs",
        "compile_ns",
        "compiles",
        "disk",
        "disk_hits",
        "epoch",
        "jit",
        "keys",
        "spec",
        "tiling_ns",
        "tilings",
    )

    def __init__(self, spec: CompileSpec, disk: DiskCache | None = None) -> None:
        self.spec = spec
        #: ACL's on-disk op cache (None: none named)
        self.disk = disk
        self.disk_hits = 0
        self.keys: set[tuple] = set()
        self.jit = spec.jit_compile
        #: task attributes of the kernels launched now (their OP State)
        self.attrs = STATIC_ATTRS if self.jit else DYNAMIC_ATTRS
        self.compiles = self.tilings = self.compile_ns = self.tiling_ns = 0
        #: changes whenever keys are forgotten, unique in the process: a caller may remember
        #: "key k is in this cache" as long as the epoch it saw is still current
        self.epoch = next(_EPOCHS)

    def set_mode(self, jit_compile: bool) -> None:
        """Switch between online compilation and binary kernels (keys seen stay known: a key
        built in one mode is not rebuilt in the other, as an approximation [U])."""
        self.jit = bool(jit_compile)
        self.attrs = STATIC_ATTRS if self.jit else DYNAMIC_ATTRS

    def clear(self) -> None:
        """Forget every key and the counters (the mode stays)."""
        self.keys.clear()
        self.epoch = next(_EPOCHS)
        self.compiles = self.tilings = self.compile_ns = self.tiling_ns = self.disk_hits = 0

    def stats(self) -> CacheStats:
        """The counters now."""
        return CacheStats(
            self.jit,
            len(self.keys),
            self.compiles,
            self.tilings,
            self.compile_ns,
            self.tiling_ns,
            self.disk_hits,
        )

    def miss(self, engine: Engine, key: tuple, op_types: Iterable[str]) -> None:
        """``key`` is new: remember it and charge the host for each kernel it launches."""
        if len(self.keys) >= KEY_LIMIT:
            self.keys.clear()
            self.epoch = next(_EPOCHS)
        self.keys.add(key)
        disk = self.disk
        if self.jit and disk is not None:
            if disk.lookup(key):  # compiled by an earlier run: loaded, not compiled
                self.disk_hits += 1
                return
            disk.store(key)
        if self.jit:
            cost, prefix = self.spec.online_compile_ns, COMPILE_PREFIX
        else:
            cost, prefix = self.spec.tiling_ns, TILING_PREFIX
        for op_type in op_types:
            if self.jit:
                self.compiles += 1
                self.compile_ns += cost
            else:
                self.tilings += 1
                self.tiling_ns += cost
            if cost:
                engine.host_span(cost, prefix + op_type)


def attributes(args: tuple) -> tuple:
    """The kernel-selecting attributes among an op's positional arguments (see the module
    docstring): everything but tensors, tensor lists and floating-point scalars."""
    out: list[Any] = []
    for a in args:
        if isinstance(a, _ATTR_TYPES):
            out.append(a)
        elif isinstance(a, (list, tuple)) and a and all(type(x) is int for x in a):
            out.append(tuple(a))
    return tuple(out)


def attribute_slots(schema: torch.FunctionSchema) -> tuple[int, ...]:
    """Positions of ``schema``'s arguments that :func:`attributes` may keep: all but those
    that can never hold an attribute (a ``float``, always a Python float in a boxed call, and
    a ``Tensor[]``, never a list of ints)."""
    slots = []
    for i, arg in enumerate(schema.arguments):
        kind = arg.type
        if isinstance(kind, torch.FloatType):
            continue
        if isinstance(kind, torch.ListType) and isinstance(kind.getElementType(), torch.TensorType):
            continue
        slots.append(i)
    return tuple(slots)


def attributes_at(args: tuple, slots: tuple[int, ...]) -> tuple:
    """:func:`attributes` of ``args`` looking only at positions ``slots`` (from
    :func:`attribute_slots` of the op's schema): the same tuple, with less work."""
    out: list[Any] = []
    count = len(args)
    for i in slots:
        if i >= count:
            break
        a = args[i]
        if a.__class__ is _TENSOR:
            continue
        if isinstance(a, _ATTR_TYPES):
            out.append(a)
        elif isinstance(a, (list, tuple)) and a and all(type(x) is int for x in a):
            out.append(tuple(a))
    return tuple(out)
