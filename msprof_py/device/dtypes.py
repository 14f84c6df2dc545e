"""Data types as the simulated device knows them: names and element sizes (no torch here)."""

from __future__ import annotations

#: Element size in bytes of every dtype the device can hold.
ITEMSIZE: dict[str, int] = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "int4": 1,  # packed two per byte on real hardware; counted as one byte per element here
    "bool": 1,
    "complex64": 8,
    "complex128": 16,
}

_ALIASES = {
    "fp64": "float64",
    "double": "float64",
    "fp32": "float32",
    "float": "float32",
    "hf32": "float32",
    "fp16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
    "long": "int64",
    "int": "int32",
    "short": "int16",
    "byte": "uint8",
}


def canonical(dtype: str) -> str:
    """The canonical dtype name: ``"fp16"`` -> ``"float16"``, ``"torch.int64"`` -> ``"int64"``."""
    name = dtype.removeprefix("torch.").lower()
    name = _ALIASES.get(name, name)
    if name not in ITEMSIZE:
        raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(sorted(ITEMSIZE))}")
    return name


def itemsize(dtype: str) -> int:
    """Bytes per element of ``dtype``."""
    size = ITEMSIZE.get(dtype)
    return size if size is not None else ITEMSIZE[canonical(dtype)]
