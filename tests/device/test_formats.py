"""Tests for msprof_py.device.formats: aclFormat ids, storage shapes and padded sizes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msprof_py.device.dtypes import ITEMSIZE
from msprof_py.device.formats import (
    PRIVATE_FORMATS,
    Format,
    c0,
    is_private,
    logical_bytes,
    padding_bytes,
    storage_bytes,
    storage_shape,
    transdata_bytes,
)

# ---- Format enum ----------------------------------------------------------------------------

ACL_IDS = {
    "NCHW": 0,
    "NHWC": 1,
    "ND": 2,
    "NC1HWC0": 3,
    "FRACTAL_Z": 4,
    "NC1HWC0_C04": 12,
    "HWCN": 16,
    "NDHWC": 27,
    "FRACTAL_NZ": 29,
    "NCDHW": 30,
    "NDC1HWC0": 32,
    "FRACTAL_Z_3D": 33,
    "NC": 35,
    "NCL": 47,
}


def test_members_and_values() -> None:
    assert {f.name for f in Format} == set(ACL_IDS)
    for f in Format:
        assert f.value == f.name
        assert str(f) == f.name
        assert f == f.name  # a str enum compares equal to its name


@pytest.mark.parametrize(("name", "acl_id"), ACL_IDS.items())
def test_acl_ids_round_trip(name: str, acl_id: int) -> None:
    fmt = Format[name]
    assert fmt.acl_id == acl_id
    assert Format.from_acl(acl_id) is fmt
    assert Format.parse(acl_id) is fmt
    assert Format.parse(str(acl_id)) is fmt


def test_from_acl_rejects_unknown_ids() -> None:
    with pytest.raises(ValueError, match="unknown aclFormat id 5"):
        Format.from_acl(5)
    with pytest.raises(ValueError, match="FRACTAL_NZ=29"):
        Format.from_acl(-1)
    with pytest.raises(ValueError):
        Format.from_acl(True)  # a bool is not an id


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("NC1HWC0", Format.NC1HWC0),
        ("nc1hwc0", Format.NC1HWC0),
        (" Fractal_Nz ", Format.FRACTAL_NZ),
        ("fractal_z_3d", Format.FRACTAL_Z_3D),
        (Format.ND, Format.ND),
        (29, Format.FRACTAL_NZ),
        ("0", Format.NCHW),
    ],
)
def test_parse(value: str | int | Format, expected: Format) -> None:
    assert Format.parse(value) is expected


@pytest.mark.parametrize("bad", ["NCHWX", "", "5HD", 99, True, 1.5, None])
def test_parse_errors_list_valid_names(bad: object) -> None:
    with pytest.raises(ValueError) as info:
        Format.parse(bad)  # type: ignore[arg-type]
    message = str(info.value)
    if isinstance(bad, int) and not isinstance(bad, bool):
        assert "FRACTAL_NZ=29" in message
    else:
        assert "valid names" in message
        assert "NC1HWC0" in message and "FRACTAL_Z_3D" in message


# ---- C0 and private formats -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [("float16", 16), ("bfloat16", 16), ("fp16", 16), ("int8", 32), ("float32", 8), ("int32", 8)],
)
def test_c0(dtype: str, expected: int) -> None:
    assert c0(dtype) == expected


def test_private_formats() -> None:
    private = {"NC1HWC0", "NC1HWC0_C04", "FRACTAL_Z", "FRACTAL_NZ", "NDC1HWC0", "FRACTAL_Z_3D"}
    assert {f.name for f in PRIVATE_FORMATS} == private
    for f in Format:
        assert is_private(f) == (f.name in private)
    assert is_private("fractal_nz") and is_private(3)
    assert not is_private("ND") and not is_private(1)


# ---- storage shapes -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "dtype", "fmt", "expected"),
    [
        # unchanged formats
        ((2, 3, 5, 5), "float16", "ND", (2, 3, 5, 5)),
        ((7,), "float16", "ND", (7,)),
        ((), "float32", "ND", ()),
        ((2, 3, 5, 5), "float16", "NCHW", (2, 3, 5, 5)),
        ((2, 3, 4, 5, 6), "float16", "NCDHW", (2, 3, 4, 5, 6)),
        ((8, 3), "float16", "NC", (8, 3)),
        ((8, 3, 9), "float16", "NCL", (8, 3, 9)),
        # permutations of NCHW / NCDHW
        ((2, 3, 4, 5), "float16", "NHWC", (2, 4, 5, 3)),
        ((2, 3, 4, 5), "float16", "HWCN", (4, 5, 3, 2)),
        ((2, 3, 4, 5, 6), "float16", "NDHWC", (2, 4, 5, 6, 3)),
        # NC1HWC0: C1 = ceil(C / C0)
        ((2, 3, 5, 5), "float16", "NC1HWC0", (2, 1, 5, 5, 16)),
        ((2, 33, 5, 5), "bfloat16", "NC1HWC0", (2, 3, 5, 5, 16)),
        ((1, 40, 2, 2), "int8", "NC1HWC0", (1, 2, 2, 2, 32)),  # C0 = 32
        ((1, 10, 3, 3), "float32", "NC1HWC0", (1, 2, 3, 3, 8)),  # C0 = 8
        # fewer than 4 dims: (C,) / (C, H) / (C, H, W) with N = 1, missing dims 1
        ((20,), "float16", "NC1HWC0", (1, 2, 1, 1, 16)),
        ((20, 7), "float16", "NC1HWC0", (1, 2, 7, 1, 16)),
        ((3, 5, 5), "float16", "NC1HWC0", (1, 1, 5, 5, 16)),
        ((), "float16", "NC1HWC0", (1, 1, 1, 1, 16)),
        ((3, 5, 5), "float16", "NHWC", (1, 5, 5, 3)),
        # NC1HWC0_C04: C0 fixed at 4
        ((8, 3, 224, 224), "float16", "NC1HWC0_C04", (8, 1, 224, 224, 4)),
        ((8, 6, 2, 2), "int8", "NC1HWC0_C04", (8, 2, 2, 2, 4)),
        # FRACTAL_Z of a conv weight (Cout, Cin, Kh, Kw): (C1*Kh*Kw, ceil(Cout/16), 16, C0)
        ((64, 3, 7, 7), "float16", "FRACTAL_Z", (1 * 7 * 7, 4, 16, 16)),
        ((20, 9, 3, 3), "float32", "FRACTAL_Z", (2 * 3 * 3, 2, 16, 8)),
        ((20, 9, 3, 3), "int8", "FRACTAL_Z", (1 * 3 * 3, 2, 16, 32)),
        # FRACTAL_NZ of [..., H, W]: [..., ceil(W/C0), ceil(H/16), 16, C0]
        ((100, 50), "float16", "FRACTAL_NZ", (4, 7, 16, 16)),
        ((3, 100, 50), "float16", "FRACTAL_NZ", (3, 4, 7, 16, 16)),
        ((2, 3, 100, 50), "float16", "FRACTAL_NZ", (2, 3, 4, 7, 16, 16)),
        ((16, 64), "int8", "FRACTAL_NZ", (2, 1, 16, 32)),
        ((17, 9), "float32", "FRACTAL_NZ", (2, 2, 16, 8)),
        ((50,), "float16", "FRACTAL_NZ", (4, 1, 16, 16)),  # a vector is one row [1, W]
        ((), "float16", "FRACTAL_NZ", (1, 1, 16, 16)),
        # 3-D formats from NCDHW
        ((2, 3, 4, 5, 6), "float16", "NDC1HWC0", (2, 4, 1, 5, 6, 16)),
        ((2, 40, 4, 5, 6), "int8", "NDC1HWC0", (2, 4, 2, 5, 6, 32)),
        # FRACTAL_Z_3D of (Cout, Cin, D, Kh, Kw): (D*C1*Kh*Kw, ceil(Cout/16), 16, C0)
        ((32, 20, 3, 3, 3), "float16", "FRACTAL_Z_3D", (3 * 2 * 3 * 3, 2, 16, 16)),
        ((33, 8, 2, 1, 1), "float32", "FRACTAL_Z_3D", (2 * 1 * 1 * 1, 3, 16, 8)),
    ],
)
def test_storage_shape(
    shape: tuple[int, ...], dtype: str, fmt: str, expected: tuple[int, ...]
) -> None:
    assert storage_shape(shape, dtype, fmt) == expected


def test_storage_shape_accepts_lists_and_acl_ids() -> None:
    assert storage_shape([2, 3, 5, 5], "fp16", 3) == (2, 1, 5, 5, 16)
    assert storage_shape([100, 50], "half", Format.FRACTAL_NZ) == (4, 7, 16, 16)


@pytest.mark.parametrize(
    ("shape", "fmt"),
    [
        ((2, 3, 4, 5, 6), "NC1HWC0"),
        ((2, 3, 4, 5, 6), "NHWC"),
        ((2, 3, 4, 5, 6), "FRACTAL_Z"),
        ((2, 3, 4, 5, 6, 7), "NC1HWC0_C04"),
        ((2, 3, 4, 5), "NDC1HWC0"),
        ((2, 3, 4, 5), "NDHWC"),
        ((2, 3, 4, 5, 6, 7), "FRACTAL_Z_3D"),
        ((), "FRACTAL_Z_3D"),
    ],
)
def test_storage_shape_rejects_unmappable_ranks(shape: tuple[int, ...], fmt: str) -> None:
    with pytest.raises(ValueError, match=fmt):
        storage_shape(shape, "float16", fmt)


@pytest.mark.parametrize("shape", [(2, -1), (2.5, 3), (True, 3)])
def test_invalid_shapes(shape: tuple[object, ...]) -> None:
    with pytest.raises(ValueError, match="non-negative integers"):
        logical_bytes(shape, "float16")  # type: ignore[arg-type]


# ---- byte counts ----------------------------------------------------------------------------


def test_nc1hwc0_bytes_example() -> None:
    shape = (2, 3, 5, 5)
    assert logical_bytes(shape, "float16") == 2 * 3 * 5 * 5 * 2 == 300
    assert storage_bytes(shape, "float16", "NC1HWC0") == 2 * 1 * 5 * 5 * 16 * 2 == 1600
    assert padding_bytes(shape, "float16", "NC1HWC0") == 1600 - 300 == 1300
    assert padding_bytes(shape, "float16", "NCHW") == 0
    assert padding_bytes(shape, "float16", "NHWC") == 0


def test_int8_and_fp32_bytes() -> None:
    # int8: C0 = 32, 40 channels -> 2 blocks of 32
    assert storage_bytes((1, 40, 2, 2), "int8", "NC1HWC0") == 1 * 2 * 2 * 2 * 32 * 1 == 256
    assert padding_bytes((1, 40, 2, 2), "int8", "NC1HWC0") == 256 - 160
    # fp32: C0 = 8, 10 channels -> 2 blocks of 8
    assert storage_bytes((1, 10, 3, 3), "float32", "NC1HWC0") == 1 * 2 * 3 * 3 * 8 * 4 == 576
    assert padding_bytes((1, 10, 3, 3), "float32", "NC1HWC0") == 576 - 90 * 4


def test_fractal_bytes() -> None:
    # conv weight 64x3x7x7 fp16: Cin 3 padded to 16
    assert storage_bytes((64, 3, 7, 7), "float16", "FRACTAL_Z") == 49 * 4 * 16 * 16 * 2
    assert logical_bytes((64, 3, 7, 7), "float16") == 64 * 3 * 49 * 2
    # NZ of 100x50 fp16: 112 rows x 64 columns
    assert storage_bytes((100, 50), "float16", "FRACTAL_NZ") == 112 * 64 * 2 == 14336
    assert padding_bytes((100, 50), "float16", "FRACTAL_NZ") == 14336 - 100 * 50 * 2


def test_scalars_have_one_element() -> None:
    assert logical_bytes((), "float32") == 4
    assert storage_bytes((), "float32", "ND") == 4
    assert storage_bytes((), "float16", "NC1HWC0") == 16 * 2
    assert padding_bytes((), "float16", "NC1HWC0") == 30


def test_empty_tensors_take_no_bytes() -> None:
    assert logical_bytes((0, 3), "float16") == 0
    assert storage_bytes((0, 3, 5, 5), "float16", "NC1HWC0") == 0
    assert storage_bytes((0, 50), "float16", "FRACTAL_NZ") == 0


def test_transdata_bytes() -> None:
    shape = (2, 3, 5, 5)
    assert transdata_bytes(shape, "float16", "NCHW", "NC1HWC0") == 300 + 1600
    assert transdata_bytes(shape, "float16", "NC1HWC0", "NCHW") == 1600 + 300
    assert transdata_bytes((100, 50), "float16", "ND", "FRACTAL_NZ") == 10000 + 14336
    assert transdata_bytes(shape, "float16", 0, 0) == 600


# ---- properties -----------------------------------------------------------------------------

_NCDHW_FORMATS = {Format.NDHWC, Format.NDC1HWC0, Format.FRACTAL_Z_3D}
_NCHW_FORMATS = {Format.NHWC, Format.HWCN, Format.NC1HWC0, Format.NC1HWC0_C04, Format.FRACTAL_Z}


def _rank_range(fmt: Format) -> tuple[int, int]:
    if fmt in _NCDHW_FORMATS:
        return 5, 5
    if fmt in _NCHW_FORMATS:
        return 0, 4
    return 0, 5


@st.composite
def _cases(draw: st.DrawFn, full_rank: bool = False) -> tuple[tuple[int, ...], str, Format]:
    dtype = draw(st.sampled_from(sorted(ITEMSIZE)))
    fmt = draw(st.sampled_from(list(Format)))
    low, high = _rank_range(fmt)
    if full_rank:  # every axis present: no implicit N = 1 or H = 1
        low = max(low, 4 if fmt in _NCHW_FORMATS else 2)
    rank = draw(st.integers(low, high))
    shape = tuple(draw(st.lists(st.integers(0, 40), min_size=rank, max_size=rank)))
    return shape, dtype, fmt


@settings(max_examples=300, deadline=None)
@given(_cases())
def test_storage_never_smaller_than_logical(case: tuple[tuple[int, ...], str, Format]) -> None:
    shape, dtype, fmt = case
    logical = logical_bytes(shape, dtype)
    stored = storage_bytes(shape, dtype, fmt)
    assert stored >= logical
    assert padding_bytes(shape, dtype, fmt) == stored - logical >= 0
    if not is_private(fmt):
        assert stored == logical
    assert transdata_bytes(shape, dtype, "ND", fmt) == logical + stored


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def _aligned(shape: tuple[int, ...], dtype: str, fmt: Format) -> tuple[int, ...]:
    """``shape`` with its blocked axes rounded up to whole blocks for ``fmt``."""
    dims = list(shape)
    k = c0(dtype)
    if fmt in {Format.NC1HWC0, Format.NDC1HWC0}:
        dims[1] = _round_up(dims[1], k)
    elif fmt is Format.NC1HWC0_C04:
        dims[1] = _round_up(dims[1], 4)
    elif fmt in {Format.FRACTAL_Z, Format.FRACTAL_Z_3D}:
        dims[0] = _round_up(dims[0], 16)
        dims[1] = _round_up(dims[1], k)
    elif fmt is Format.FRACTAL_NZ:
        dims[-2] = _round_up(dims[-2], 16)
        dims[-1] = _round_up(dims[-1], k)
    return tuple(dims)


@settings(max_examples=300, deadline=None)
@given(_cases(full_rank=True))
def test_no_padding_when_blocked_axes_are_aligned(
    case: tuple[tuple[int, ...], str, Format],
) -> None:
    shape, dtype, fmt = case
    aligned = _aligned(shape, dtype, fmt)
    assert padding_bytes(aligned, dtype, fmt) == 0


def test_storage_bytes_kept_per_shape_still_refuses_bad_shapes_each_time() -> None:
    """Sizes are kept per (shape, dtype, format): a list and a tuple of the same shape, asked
    twice, give the hand-computed size; a bad shape raises every time (nothing kept)."""
    for shape in ((64, 3, 7, 7), [64, 3, 7, 7], (64, 3, 7, 7)):
        assert storage_bytes(shape, "float16", "FRACTAL_Z") == 49 * 4 * 16 * 16 * 2
    for _ in range(2):
        with pytest.raises(ValueError, match="non-negative"):
            storage_bytes((2, -1, 3, 3), "float16", "NC1HWC0")
        with pytest.raises(ValueError, match="non-negative"):
            storage_bytes(([2], 3), "float16", "ND")  # an unhashable dimension
