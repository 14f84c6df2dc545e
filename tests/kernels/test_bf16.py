"""bfloat16 in the kernel simulator: rounding, vector ops, Mmad, Fixpipe, against hand values."""

from __future__ import annotations

import numpy as np

from msprof_py.kernels import (
    Add,
    Cast,
    DataCopy,
    Fixpipe,
    LoadData,
    Mmad,
    TPipe,
    TPosition,
    TQue,
    launch,
)
from msprof_py.kernels.bf16 import BF16, from_bf16, is_bf16, to_bf16


def test_rounding_is_to_nearest_even_on_the_bit_pattern() -> None:
    # bf16 keeps 7 mantissa bits: 1 + 2**-8 is halfway between 1 and 1 + 2**-7 (even: 1),
    # 1 + 3 * 2**-8 halfway between 1 + 2**-7 and 1 + 2**-6 (even: 1 + 2**-6)
    x = to_bf16([1.0, 1 + 2**-8, 1 + 3 * 2**-8, -2.0, np.nan])
    assert x.dtype == BF16 and is_bf16(x.dtype) and not is_bf16(np.dtype(np.uint16))
    assert list(x.view(np.uint16)) == [0x3F80, 0x3F80, 0x3F82, 0xC000, 0x7FC0]
    assert list(from_bf16(x[:4])) == [1.0, 1.0, 1 + 2**-6, -2.0]


def _add(x, y, z, n: int) -> None:
    qx, qy, qz = TQue(TPosition.VECIN, 1), TQue(TPosition.VECIN, 1), TQue(TPosition.VECOUT, 1)
    pipe = TPipe()
    for q in (qx, qy, qz):
        pipe.InitBuffer(q, 1, n * 2)
    xl, yl = qx.AllocTensor("bfloat16"), qy.AllocTensor("bf16")
    DataCopy(xl, x, n)
    DataCopy(yl, y, n)
    qx.EnQue(xl)
    qy.EnQue(yl)
    zl = qz.AllocTensor("bfloat16")
    Add(zl, qx.DeQue(), qy.DeQue(), n)
    qz.EnQue(zl)
    DataCopy(z, qz.DeQue(), n)


def test_vector_add_computes_in_float32_and_rounds_to_bf16() -> None:
    n = 128
    x = to_bf16(np.full(n, 1.0))
    y = to_bf16(np.full(n, 2**-8))  # 1 + 2**-8 rounds to 1 (even); 1 + 3 * 2**-8 would not
    y[1::2] = to_bf16(3 * 2**-8)
    z = np.zeros(n, BF16)
    result = launch(_add, 1, x, y, z, n)
    assert list(from_bf16(z[:4])) == [1.0, 1 + 2**-6, 1.0, 1 + 2**-6]
    (add,) = [r for r in result.instructions() if r.name == "Add"]
    assert add.cycles == 1 and add.detail == "128 x bfloat16"  # 256 B: one repeat, as fp16


def _matmul(a, b, c, m: int, k: int, n: int) -> None:
    pipe = TPipe()
    qa1, qb1 = TQue(TPosition.A1, 1), TQue(TPosition.B1, 1)
    qa2, qb2, qc = TQue(TPosition.A2, 1), TQue(TPosition.B2, 1), TQue(TPosition.CO1, 1)
    for q, size in ((qa1, m * k * 2), (qb1, k * n * 2), (qa2, m * k * 2), (qb2, k * n * 2),
                    (qc, m * n * 4)):  # fmt: skip
        pipe.InitBuffer(q, 1, size)
    for src, q1, q2, count in ((a, qa1, qa2, m * k), (b, qb1, qb2, k * n)):
        t1 = q1.AllocTensor("bfloat16")
        DataCopy(t1, src, count)
        q1.EnQue(t1)
        t2 = q2.AllocTensor("bfloat16")
        LoadData(t2, q1.DeQue(), count)
        q2.EnQue(t2)
    acc = qc.AllocTensor("float32")
    Mmad(acc, qa2.DeQue(), qb2.DeQue(), m, k, n)
    qc.EnQue(acc)
    Fixpipe(c, qc.DeQue(), m, n)


def test_mmad_takes_bf16_exactly_and_fixpipe_rounds_back() -> None:
    m, k, n = 16, 32, 16
    rng = np.random.default_rng(1)
    a, b = to_bf16(rng.standard_normal((m, k))), to_bf16(rng.standard_normal((k, n)))
    c = np.zeros((m, n), BF16)
    result = launch(_matmul, 1, a, b, c, m, k, n)
    exact = from_bf16(a).astype(np.float64) @ from_bf16(b).astype(np.float64)
    np.testing.assert_array_equal(c.view(np.uint16), to_bf16(exact).view(np.uint16))
    (mmad,) = [r for r in result.instructions() if r.name == "Mmad"]
    assert mmad.cycles == 2 and "bfloat16" in mmad.detail  # 16x16x16 fractals: 1 x 2 x 1


def test_cast_between_fp32_and_bf16() -> None:
    def kernel(x, y) -> None:
        q, qo = TQue(TPosition.VECIN, 1), TQue(TPosition.VECOUT, 1)
        TPipe().InitBuffer(q, 1, 256)
        TPipe().InitBuffer(qo, 1, 128)
        t = q.AllocTensor("float32")
        DataCopy(t, x, 64)
        o = qo.AllocTensor("bfloat16")
        Cast(o, t, "CAST_RINT", 64)
        DataCopy(y, o, 64)

    x = np.linspace(-3, 3, 64, dtype=np.float32)
    y = np.zeros(64, BF16)
    launch(kernel, 1, x, y, strict_sync=False)
    np.testing.assert_array_equal(y.view(np.uint16), to_bf16(x).view(np.uint16))
