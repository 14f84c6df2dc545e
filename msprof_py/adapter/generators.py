"""``torch.Generator(device="npu")``: a generator for npu random ops.

torch builds a device generator through the PrivateUse1 hooks' ``getNewGenerator``, which a
Python backend cannot provide, so ``torch.Generator(device="npu")`` raises. The simulated
device draws on the host from CPU generators (see :mod:`msprof_py.adapter.npu_random`): an npu
generator is a CPU generator that reports the npu device. ``torch.Generator`` becomes a
subclass that builds one for npu devices and plain generators otherwise; ``isinstance`` still
holds for every generator, ``torch.default_generator`` included. Draws with it equal the same
draws on CPU with a CPU generator of the same seed.
"""

from __future__ import annotations

from typing import Any

import torch

_CGenerator = torch._C.Generator


class _GeneratorMeta(type(_CGenerator)):
    """Makes ``isinstance(g, torch.Generator)`` true for every generator (torch's own
    default generators are instances of the C class, not of the subclass)."""

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, _CGenerator)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, _CGenerator)


class Generator(_CGenerator, metaclass=_GeneratorMeta):
    """``torch.Generator``: as torch's, and ``Generator(device="npu")`` works (a CPU-backed
    generator whose ``device`` is the npu device)."""

    def __new__(cls, device: Any = None) -> Generator:
        target = torch.device(device) if device is not None else None
        if target is None or target.type != "npu":
            return super().__new__(cls) if target is None else super().__new__(cls, target)
        gen = super().__new__(cls, "cpu")
        gen._npu_device = torch.device("npu", target.index if target.index is not None else 0)
        return gen

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        """The device the generator draws for (npu for an npu generator)."""
        npu = getattr(self, "_npu_device", None)
        return npu if npu is not None else _CGenerator.device.__get__(self)


def install() -> None:
    """Make ``torch.Generator`` the npu-aware class (idempotent)."""
    if torch.Generator is not Generator:
        torch.Generator = Generator  # type: ignore[misc]
