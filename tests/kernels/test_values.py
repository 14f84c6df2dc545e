"""Values a kernel computes match numpy: elementwise, softmax pieces, a tiled matmul."""

from __future__ import annotations

import numpy as np
import pytest

from msprof_py.kernels import (
    Adds,
    Cast,
    DataCopy,
    DataCopyParams,
    Div,
    Duplicate,
    Exp,
    Fixpipe,
    GetBlockIdx,
    HardEvent,
    LoadData,
    Max,
    Mmad,
    Muls,
    ReduceMax,
    ReduceSum,
    SetFlag,
    Sub,
    SyncError,
    TBuf,
    TPipe,
    TPosition,
    TQue,
    WaitFlag,
    launch,
)


def test_elementwise_ops_match_numpy_in_fp16() -> None:
    n = 2048
    rng = np.random.default_rng(3)
    x = rng.uniform(0.5, 2, n).astype(np.float16)
    y = rng.uniform(0.5, 2, n).astype(np.float16)
    out = np.zeros((4, n), np.float16)

    def kernel(x, y, out) -> None:
        buf = TBuf()
        TPipe().InitBuffer(buf, 6 * n * 2)
        t = buf.Get("float16")
        a, b, c = t[:n], t[n : 2 * n], t[2 * n :]
        DataCopy(a, x, n)
        DataCopy(b, y, n)
        SetFlag(HardEvent.MTE2_V)
        WaitFlag(HardEvent.MTE2_V)
        Sub(c[:n], a, b, n)
        Div(c[n : 2 * n], a, b, n)
        Max(c[2 * n : 3 * n], a, b, n)
        Muls(c[3 * n :], a, 0.5, n)
        SetFlag(HardEvent.V_MTE3)
        WaitFlag(HardEvent.V_MTE3)
        DataCopy(out, c, 4 * n)

    result = launch(kernel, 1, x, y, out)
    assert np.array_equal(out[0], x - y)
    assert np.array_equal(out[1], x / y)
    assert np.array_equal(out[2], np.maximum(x, y))
    assert np.array_equal(out[3], x * np.float16(0.5))
    # 16 repeats per op (2048 x 2 B / 256 B); Div takes 2 cycles per repeat
    assert result.pipe_busy()["V"] == 16 + 32 + 16 + 16


def test_softmax_pieces_match_numpy() -> None:
    # one row per block: max, x - max, exp, sum, x / sum, in fp32; cast back to fp16
    rows, n = 4, 1024
    rng = np.random.default_rng(5)
    x = rng.standard_normal((rows, n)).astype(np.float32) * 4
    out = np.zeros((rows, n), np.float16)

    def kernel(x, out) -> None:
        row = x[GetBlockIdx() * n :]
        pipe = TPipe()
        qin, qout = TQue(TPosition.VECIN, 1), TQue(TPosition.VECOUT, 1)
        work = TBuf()
        pipe.InitBuffer(qin, 1, n * 4)
        pipe.InitBuffer(qout, 1, n * 2)
        pipe.InitBuffer(work, 2 * n * 4)
        t = qin.AllocTensor("float32")
        DataCopy(t, row, n)
        qin.EnQue(t)
        t = qin.DeQue()
        w = work.Get("float32")
        stat, tmp = w[:64], w[64:]
        ReduceMax(stat, t, tmp, n)
        SetFlag(HardEvent.V_S)
        WaitFlag(HardEvent.V_S)
        neg_max = -stat.GetValue(0)
        Adds(t, t, neg_max, n)
        Exp(t, t, n)
        ReduceSum(stat, t, tmp, n)
        SetFlag(HardEvent.V_S)
        WaitFlag(HardEvent.V_S)
        total = stat.GetValue(0)
        Muls(t, t, 1.0 / total, n)
        o = qout.AllocTensor("float16")
        Cast(o, t, "CAST_NONE", n)
        qout.EnQue(o)
        qin.FreeTensor(t)
        o = qout.DeQue()
        DataCopy(out[GetBlockIdx() * n :], o, n)
        qout.FreeTensor(o)

    result = launch(kernel, rows, x, out)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    ref = e / e.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(out.astype(np.float32), ref, rtol=2e-3, atol=1e-5)
    # ReduceMax of 1024 fp32: 16 repeats, then 1 -> 17 cycles
    reduce = [i for i in result.instructions() if i.name == "ReduceMax" and i.block == 0]
    assert reduce[0].cycles == 17


def test_scalar_reads_wait_for_the_vector_pipe() -> None:
    # GetValue after ReduceMax with no V_S flag: a race the simulator reports
    def kernel() -> None:
        work = TBuf()
        TPipe().InitBuffer(work, 4096)
        w = work.Get("float32")
        Duplicate(w, 1.0, 512)
        ReduceMax(w[512:], w, None, 512)
        w[512:].GetValue(0)

    with pytest.raises(SyncError, match=r"GetValue \(S\) starts .* ReduceMax \(V\) writes"):
        launch(kernel, 1)


def _matmul_kernel(a, b, c, m: int, k: int, n: int, mt: int, nt: int, kt: int) -> None:
    """c (fp16) = a @ b, one mt x nt output tile per block, K in kt slices through
    GM -> L1 (MTE2) -> L0A / L0B (MTE1) -> Mmad into L0C -> Fixpipe to GM."""
    blk = GetBlockIdx()
    row0, col0 = (blk // (n // nt)) * mt, (blk % (n // nt)) * nt
    pipe = TPipe()
    qa1, qb1 = TQue(TPosition.A1, 2, "A1"), TQue(TPosition.B1, 2, "B1")
    qa2, qb2 = TQue(TPosition.A2, 2, "A2"), TQue(TPosition.B2, 2, "B2")
    qc = TQue(TPosition.CO1, 1, "CO1")
    pipe.InitBuffer(qa1, 2, mt * kt * 2)
    pipe.InitBuffer(qb1, 2, kt * nt * 2)
    pipe.InitBuffer(qa2, 2, mt * kt * 2)
    pipe.InitBuffer(qb2, 2, kt * nt * 2)
    pipe.InitBuffer(qc, 1, mt * nt * 4)
    acc = qc.AllocTensor("float32")
    for step in range(k // kt):
        k0 = step * kt
        a1, b1 = qa1.AllocTensor("float16"), qb1.AllocTensor("float16")
        DataCopy(a1, a[row0 * k + k0 :], DataCopyParams(mt, kt * 2 // 32, (k - kt) * 2 // 32, 0))
        DataCopy(b1, b[k0 * n + col0 :], DataCopyParams(kt, nt * 2 // 32, (n - nt) * 2 // 32, 0))
        qa1.EnQue(a1)
        qb1.EnQue(b1)
        a1, b1 = qa1.DeQue(), qb1.DeQue()
        a2, b2 = qa2.AllocTensor("float16"), qb2.AllocTensor("float16")
        LoadData(a2, a1, mt * kt)
        LoadData(b2, b1, kt * nt)
        qa2.EnQue(a2)
        qb2.EnQue(b2)
        qa1.FreeTensor(a1)
        qb1.FreeTensor(b1)
        a2, b2 = qa2.DeQue(), qb2.DeQue()
        Mmad(acc, a2, b2, mt, kt, nt, accumulate=step > 0)
        qa2.FreeTensor(a2)
        qb2.FreeTensor(b2)
    qc.EnQue(acc)
    acc = qc.DeQue()
    Fixpipe(c[row0 * n + col0 :], acc, mt, nt, dst_row_stride=n)
    qc.FreeTensor(acc)


def test_tiled_matmul_through_l1_l0_matches_numpy() -> None:
    m, k, n, mt, nt, kt = 64, 256, 64, 32, 32, 64
    rng = np.random.default_rng(7)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    c = np.zeros((m, n), np.float16)
    result = launch(_matmul_kernel, 4, a, b, c, m, k, n, mt, nt, kt)
    ref = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)
    np.testing.assert_allclose(c.astype(np.float32), ref.astype(np.float32), rtol=2e-3, atol=2e-2)
    assert result.core_type == "mix" and result.cores == 24
    # each block: 4 K slices of 2 x 4 x 2 fractals (32x64x32) = 16 cycles each
    assert all(b.pipe_busy["M"] == 4 * 16 for b in result.blocks)
    pipes = {i.pipe for i in result.instructions()}
    assert pipes == {"MTE2", "MTE1", "M", "FIX"}
