"""Tensor data formats of the simulated NPU: aclFormat ids, storage shapes and padded sizes.

Every function here takes the LOGICAL shape of a tensor (what the framework sees):

* NCHW order for 4-D tensors (feature maps; conv weights are ``(Cout, Cin, Kh, Kw)``),
* NCDHW order for 5-D tensors (conv3d weights are ``(Cout, Cin, D, Kh, Kw)``),
* ``[..., H, W]`` for matrices laid out as FRACTAL_NZ.

The storage shape is the physical layout a format gives those elements. The NPU-private formats
split a channel axis into blocks of ``C0 = 32 B / itemsize`` elements (and a row axis into blocks
of 16) and zero-pad the last block, so they can occupy more bytes than the logical tensor.

Rank rules (as torch_npu's ``FormatHelper``):

* ND, NCHW, NCDHW, NC and NCL never change the shape (any rank).
* NHWC, HWCN, NC1HWC0, NC1HWC0_C04 and FRACTAL_Z need at most 4 dims. Shorter shapes are
  widened to NCHW with N = 1: ``()`` -> (1, 1, 1, 1), ``(C,)`` -> (1, C, 1, 1),
  ``(C, H)`` -> (1, C, H, 1), ``(C, H, W)`` -> (1, C, H, W).
* NDHWC, NDC1HWC0 and FRACTAL_Z_3D need exactly 5 dims (NCDHW).
* FRACTAL_NZ takes any rank; a scalar is treated as ``[1, 1]`` and a vector ``(W,)`` as ``[1, W]``.

Shapes that cannot be mapped raise :class:`ValueError`.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence

from msprof_py.device.dtypes import itemsize

#: Bytes in one data block: C0 = BLOCK_BYTES // itemsize.
BLOCK_BYTES = 32
#: Rows per fractal (the "16" in FRACTAL_Z / FRACTAL_NZ).
BLOCK_ROWS = 16
#: The fixed C0 of NC1HWC0_C04.
C04 = 4


class Format(str, enum.Enum):
    """A tensor data format; the value is its name, :attr:`acl_id` its aclFormat number."""

    ND = "ND"
    NCHW = "NCHW"
    NHWC = "NHWC"
    NC1HWC0 = "NC1HWC0"
    FRACTAL_Z = "FRACTAL_Z"
    FRACTAL_NZ = "FRACTAL_NZ"
    NC1HWC0_C04 = "NC1HWC0_C04"
    HWCN = "HWCN"
    NDHWC = "NDHWC"
    NCDHW = "NCDHW"
    NDC1HWC0 = "NDC1HWC0"
    FRACTAL_Z_3D = "FRACTAL_Z_3D"
    NC = "NC"
    NCL = "NCL"

    def __str__(self) -> str:
        return self.value

    @property
    def acl_id(self) -> int:
        """The aclFormat enum value (what ``torch_npu.get_npu_format`` returns)."""
        return _ACL_IDS[self]

    @classmethod
    def from_acl(cls, acl_id: int) -> Format:
        """The format with aclFormat number ``acl_id``; raises ValueError for an unknown id."""
        fmt = None if isinstance(acl_id, bool) else _BY_ACL_ID.get(acl_id)
        if fmt is None:
            valid = ", ".join(f"{f.name}={i}" for f, i in _ACL_IDS.items())
            raise ValueError(f"unknown aclFormat id {acl_id!r}; valid ids: {valid}")
        return fmt

    @classmethod
    def parse(cls, value: str | int | Format) -> Format:
        """A format from its name (any case), its aclFormat id (int or digit string) or itself."""
        if isinstance(value, Format):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return cls.from_acl(value)
        if isinstance(value, str):
            text = value.strip()
            if text.isdigit():
                return cls.from_acl(int(text))
            try:
                return cls[text.upper()]
            except KeyError:
                pass
        valid = ", ".join(f.name for f in cls)
        raise ValueError(
            f"unknown data format {value!r}; valid names: {valid} (or an aclFormat id)"
        )


_ACL_IDS: dict[Format, int] = {
    Format.NCHW: 0,
    Format.NHWC: 1,
    Format.ND: 2,
    Format.NC1HWC0: 3,
    Format.FRACTAL_Z: 4,
    Format.NC1HWC0_C04: 12,
    Format.HWCN: 16,
    Format.NDHWC: 27,
    Format.FRACTAL_NZ: 29,
    Format.NCDHW: 30,
    Format.NDC1HWC0: 32,
    Format.FRACTAL_Z_3D: 33,
    Format.NC: 35,
    Format.NCL: 47,
}
_BY_ACL_ID: dict[int, Format] = {i: f for f, i in _ACL_IDS.items()}

#: Formats only NPU kernels understand (most aclnn ops accept only the others).
PRIVATE_FORMATS: frozenset[Format] = frozenset(
    {
        Format.NC1HWC0,
        Format.NC1HWC0_C04,
        Format.FRACTAL_Z,
        Format.FRACTAL_NZ,
        Format.NDC1HWC0,
        Format.FRACTAL_Z_3D,
    }
)

_UNCHANGED = frozenset({Format.ND, Format.NCHW, Format.NCDHW, Format.NC, Format.NCL})
_FROM_NCHW = frozenset(
    {Format.NHWC, Format.HWCN, Format.NC1HWC0, Format.NC1HWC0_C04, Format.FRACTAL_Z}
)
_FROM_NCDHW = frozenset({Format.NDHWC, Format.NDC1HWC0, Format.FRACTAL_Z_3D})

FormatLike = str | int | Format


def c0(dtype: str) -> int:
    """Elements per 32-byte block: 16 for fp16/bf16, 32 for int8, 8 for fp32."""
    return max(1, BLOCK_BYTES // itemsize(dtype))


def is_private(fmt: FormatLike) -> bool:
    """True for the NPU-private (blocked, padded) formats."""
    return Format.parse(fmt) in PRIVATE_FORMATS


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _check_shape(shape: Sequence[int]) -> tuple[int, ...]:
    dims = tuple(shape)
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int) or d < 0:
            raise ValueError(f"shape {dims!r} must hold non-negative integers")
    return dims


def _as_nchw(dims: tuple[int, ...], fmt: Format) -> tuple[int, int, int, int]:
    if len(dims) > 4:
        raise ValueError(f"format {fmt.name} needs a shape of at most 4 dims (NCHW), got {dims!r}")
    n, c, h, w = (1, *dims, *(1,) * (3 - len(dims))) if len(dims) < 4 else dims
    return n, c, h, w


def _as_ncdhw(dims: tuple[int, ...], fmt: Format) -> tuple[int, int, int, int, int]:
    if len(dims) != 5:
        raise ValueError(f"format {fmt.name} needs a 5-dim shape (NCDHW), got {dims!r}")
    n, c, d, h, w = dims
    return n, c, d, h, w


def storage_shape(shape: Sequence[int], dtype: str, fmt: FormatLike) -> tuple[int, ...]:
    """The physical shape of a tensor of logical ``shape`` stored in ``fmt`` (see module doc)."""
    fmt = Format.parse(fmt)
    dims = _check_shape(shape)
    if fmt in _UNCHANGED:
        return dims
    if fmt in _FROM_NCHW:
        n, c, h, w = _as_nchw(dims, fmt)
        k = c0(dtype)
        if fmt is Format.NHWC:
            return (n, h, w, c)
        if fmt is Format.HWCN:
            return (h, w, c, n)
        if fmt is Format.NC1HWC0:
            return (n, _ceil_div(c, k), h, w, k)
        if fmt is Format.NC1HWC0_C04:
            return (n, _ceil_div(c, C04), h, w, C04)
        # FRACTAL_Z: conv weight (Cout=N, Cin=C, Kh=H, Kw=W)
        return (_ceil_div(c, k) * h * w, _ceil_div(n, BLOCK_ROWS), BLOCK_ROWS, k)
    if fmt in _FROM_NCDHW:
        n, c, d, h, w = _as_ncdhw(dims, fmt)
        k = c0(dtype)
        if fmt is Format.NDHWC:
            return (n, d, h, w, c)
        if fmt is Format.NDC1HWC0:
            return (n, d, _ceil_div(c, k), h, w, k)
        # FRACTAL_Z_3D: conv3d weight (Cout=N, Cin=C, D, Kh=H, Kw=W)
        return (d * _ceil_div(c, k) * h * w, _ceil_div(n, BLOCK_ROWS), BLOCK_ROWS, k)
    # FRACTAL_NZ: [..., H, W] -> [..., ceil(W/C0), ceil(H/16), 16, C0]
    matrix = (1, 1, *dims)[-2:] if len(dims) < 2 else dims
    *batch, h, w = matrix
    k = c0(dtype)
    return (*batch, _ceil_div(w, k), _ceil_div(h, BLOCK_ROWS), BLOCK_ROWS, k)


def logical_bytes(shape: Sequence[int], dtype: str) -> int:
    """Bytes of the logical tensor (a scalar, shape ``()``, has one element)."""
    return math.prod(_check_shape(shape)) * itemsize(dtype)


#: (shape, dtype, format) -> storage bytes: the adapter asks for the same few tensors' padded
#: sizes on every cast and conversion (bounded)
_STORAGE_BYTES: dict[tuple[tuple[int, ...], str, FormatLike], int] = {}
_STORAGE_BYTES_LIMIT = 4096


def storage_bytes(shape: Sequence[int], dtype: str, fmt: FormatLike) -> int:
    """Bytes the tensor occupies in ``fmt``, padding included."""
    key = (tuple(shape), dtype, fmt)
    try:
        found = _STORAGE_BYTES.get(key)
    except TypeError:  # something unhashable: storage_shape says what is wrong with it
        found = None
        key = None
    if found is None:
        found = math.prod(storage_shape(shape, dtype, fmt)) * itemsize(dtype)
        if key is not None:
            if len(_STORAGE_BYTES) >= _STORAGE_BYTES_LIMIT:
                _STORAGE_BYTES.clear()
            _STORAGE_BYTES[key] = found
    return found


def padding_bytes(shape: Sequence[int], dtype: str, fmt: FormatLike) -> int:
    """Zero-padding bytes ``fmt`` adds to the logical tensor (>= 0)."""
    return storage_bytes(shape, dtype, fmt) - logical_bytes(shape, dtype)


def transdata_bytes(
    shape: Sequence[int], dtype: str, src_fmt: FormatLike, dst_fmt: FormatLike
) -> int:
    """Bytes a TransData from ``src_fmt`` to ``dst_fmt`` moves: storage read plus written."""
    return storage_bytes(shape, dtype, src_fmt) + storage_bytes(shape, dtype, dst_fmt)
