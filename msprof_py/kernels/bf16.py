"""bfloat16 for the kernel simulator (numpy has no bfloat16 type).

A bf16 array is a ``uint16`` array of bf16 bit patterns whose dtype carries the metadata
``{"kernel_dtype": "bfloat16"}`` (:data:`BF16`); numpy keeps it through slices, views and
copies, so GM tensors, DataCopy and the L1 / L0 / UB bytes need nothing special. Instructions
that compute decode bf16 operands to float32 and round results back to bf16 (round to nearest
even, as the vector unit and Cast's CAST_RINT do): vector ops compute in float32 and round once
per instruction [U: the hardware's exact intermediate rounding is not published], Mmad takes
bf16 inputs exactly (products and fp32 accumulation as for fp16), Fixpipe and Cast round fp32
to bf16. Costs are fp16's: 2 bytes per element, the 16x16x16 cube fractal (CANN DtypeMKN).

Host helpers: :func:`to_bf16` (float array -> BF16 array), :func:`from_bf16` (-> float32).
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: the dtype of a bf16 array: uint16 bit patterns, marked by dtype metadata
BF16 = np.dtype(np.uint16, metadata={"kernel_dtype": "bfloat16"})


def is_bf16(dtype: Any) -> bool:
    """True for :data:`BF16` (a uint16 dtype carrying the bfloat16 mark)."""
    meta = getattr(dtype, "metadata", None)
    return bool(meta) and meta.get("kernel_dtype") == "bfloat16"


def dtype_name(dtype: np.dtype) -> str:
    """``"bfloat16"`` for :data:`BF16`, else numpy's name."""
    return "bfloat16" if is_bf16(dtype) else str(dtype)


def to_bf16(x: Any) -> np.ndarray:
    """Round a float array to bfloat16 (nearest even); returns a :data:`BF16` array."""
    f = np.ascontiguousarray(x, dtype=np.float32)
    bits = f.view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    out = (rounded >> np.uint32(16)).astype(np.uint16)
    nan = np.isnan(f)
    if nan.any():
        out[nan] = np.uint16(0x7FC0)
    return out.view(BF16)


def from_bf16(x: np.ndarray) -> np.ndarray:
    """float32 values of a bf16 (uint16 bit pattern) array."""
    bits = np.asarray(x).view(np.uint16).astype(np.uint32) << np.uint32(16)
    return bits.view(np.float32)


def decode(x: np.ndarray) -> np.ndarray:
    """float32 values of ``x`` when it is bf16, else ``x`` itself."""
    return from_bf16(x) if is_bf16(x.dtype) else x


def encode(values: Any, dtype: np.dtype) -> np.ndarray:
    """``values`` converted to ``dtype`` (rounded to bf16 for :data:`BF16`)."""
    if is_bf16(dtype):
        return to_bf16(values)
    return np.asarray(values).astype(dtype, copy=False)
