"""Sample kernels the kernel tests share (Ascend C spelling)."""

from __future__ import annotations

from msprof_py.kernels import (
    Add,
    DataCopy,
    Exp,
    GetBlockIdx,
    GetBlockNum,
    TPipe,
    TPosition,
    TQue,
)


def add_kernel(x, y, z, total: int, tiles: int, depth: int) -> None:
    """z = x + y: each block takes total / block_dim elements in ``tiles`` tiles."""
    per_block = total // GetBlockNum()
    tile = per_block // tiles
    base = GetBlockIdx() * per_block
    pipe = TPipe()
    qx = TQue(TPosition.VECIN, depth, "inQueueX")
    qy = TQue(TPosition.VECIN, depth, "inQueueY")
    qz = TQue(TPosition.VECOUT, depth, "outQueueZ")
    for q in (qx, qy, qz):
        pipe.InitBuffer(q, depth, tile * 2)
    for i in range(tiles):
        off = base + i * tile
        xl = qx.AllocTensor("float16")
        yl = qy.AllocTensor("float16")
        DataCopy(xl, x[off:], tile)
        DataCopy(yl, y[off:], tile)
        qx.EnQue(xl)
        qy.EnQue(yl)
        xl = qx.DeQue()
        yl = qy.DeQue()
        zl = qz.AllocTensor("float16")
        Add(zl, xl, yl, tile)
        qz.EnQue(zl)
        qx.FreeTensor(xl)
        qy.FreeTensor(yl)
        zl = qz.DeQue()
        DataCopy(z[off:], zl, tile)
        qz.FreeTensor(zl)


def exp_kernel(x, z, tile: int, tiles: int, depth: int) -> None:
    """z = exp(x), one block, copy-in / compute / copy-out over ``tiles`` tiles."""
    pipe = TPipe()
    qx = TQue(TPosition.VECIN, depth, "inQueueX")
    qz = TQue(TPosition.VECOUT, depth, "outQueueZ")
    pipe.InitBuffer(qx, depth, tile * 2)
    pipe.InitBuffer(qz, depth, tile * 2)
    for i in range(tiles):
        xl = qx.AllocTensor("float16")
        DataCopy(xl, x[i * tile :], tile)
        qx.EnQue(xl)
        xl = qx.DeQue()
        zl = qz.AllocTensor("float16")
        Exp(zl, xl, tile)
        qz.EnQue(zl)
        qx.FreeTensor(xl)
        zl = qz.DeQue()
        DataCopy(z[i * tile :], zl, tile)
        qz.FreeTensor(zl)
