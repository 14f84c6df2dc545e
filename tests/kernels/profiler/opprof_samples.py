"""Kernels the op profiler tests share, each built to show one behaviour."""

from __future__ import annotations

from msprof_py.kernels import (
    Add,
    DataCopy,
    Exp,
    Fixpipe,
    GetBlockIdx,
    LoadData,
    Mmad,
    ScalarWork,
    TPipe,
    TPosition,
    TQue,
)


def copy_add_copy(x, z, n: int) -> None:
    """One tile: GM -> UB (MTE2), z = x + x (V), UB -> GM (MTE3), depth-1 queues."""
    pipe = TPipe()
    qi, qo = TQue(TPosition.VECIN, 1), TQue(TPosition.VECOUT, 1)
    pipe.InitBuffer(qi, 1, n * 2)
    pipe.InitBuffer(qo, 1, n * 2)
    xl = qi.AllocTensor("float16")
    DataCopy(xl, x, n)
    qi.EnQue(xl)
    xl = qi.DeQue()
    zl = qo.AllocTensor("float16")
    Add(zl, xl, xl, n)
    qi.FreeTensor(xl)
    qo.EnQue(zl)
    zl = qo.DeQue()
    DataCopy(z, zl, n)
    qo.FreeTensor(zl)


def tiled_exp(x, z, tile: int, tiles: int, depth: int, exps: int = 1) -> None:
    """Each block: ``tiles`` tiles of copy-in / ``exps`` x Exp / copy-out, queues of ``depth``."""
    base = GetBlockIdx() * tile * tiles
    pipe = TPipe()
    qi, qo = TQue(TPosition.VECIN, depth), TQue(TPosition.VECOUT, depth)
    pipe.InitBuffer(qi, depth, tile * 2)
    pipe.InitBuffer(qo, depth, tile * 2)
    for i in range(tiles):
        xl = qi.AllocTensor("float16")
        DataCopy(xl, x[base + i * tile :], tile)
        qi.EnQue(xl)
        xl = qi.DeQue()
        zl = qo.AllocTensor("float16")
        Exp(zl, xl, tile)
        for _ in range(exps - 1):
            Exp(zl, zl, tile)
        qi.FreeTensor(xl)
        qo.EnQue(zl)
        zl = qo.DeQue()
        DataCopy(z[base + i * tile :], zl, tile)
        qo.FreeTensor(zl)


def scalar_heavy(x, z, n: int) -> None:
    """A short copy surrounded by lots of scalar work (address math in a loop)."""
    ScalarWork(20_000, "index math")
    copy_add_copy(x, z, n)


def uneven(x, z, tile: int) -> None:
    """Block 0 does 4 tiles, the others 1 (a bad split)."""
    tiles = 4 if GetBlockIdx() == 0 else 1
    tiled_exp(x, z, tile, tiles, 2)


def one_mmad(a, b, c, m: int, k: int, n: int) -> None:
    """c = a @ b for one tile: GM -> L1 -> L0A / L0B, Mmad, Fixpipe to GM (fp16)."""
    pipe = TPipe()
    qa1, qb1 = TQue(TPosition.A1, 1), TQue(TPosition.B1, 1)
    qa2, qb2 = TQue(TPosition.A2, 1), TQue(TPosition.B2, 1)
    qc = TQue(TPosition.CO1, 1)
    for q, size in ((qa1, m * k * 2), (qb1, k * n * 2), (qa2, m * k * 2), (qb2, k * n * 2),
                    (qc, m * n * 4)):  # fmt: skip
        pipe.InitBuffer(q, 1, size)
    a1, b1 = qa1.AllocTensor("float16"), qb1.AllocTensor("float16")
    DataCopy(a1, a, m * k)
    DataCopy(b1, b, k * n)
    qa1.EnQue(a1)
    qb1.EnQue(b1)
    a1, b1 = qa1.DeQue(), qb1.DeQue()
    a2, b2 = qa2.AllocTensor("float16"), qb2.AllocTensor("float16")
    LoadData(a2, a1, m * k)
    LoadData(b2, b1, k * n)
    qa2.EnQue(a2)
    qb2.EnQue(b2)
    a2, b2 = qa2.DeQue(), qb2.DeQue()
    c1 = qc.AllocTensor("float32")
    Mmad(c1, a2, b2, m, k, n)
    qc.EnQue(c1)
    c1 = qc.DeQue()
    Fixpipe(c, c1, m, n)
    qc.FreeTensor(c1)
