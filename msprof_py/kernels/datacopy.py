"""Data moves: `DataCopy` between GM and the on-chip buffers, `DataCopyPad`, `Fixpipe`.

Paths (pipe, bandwidth table in :mod:`costs`):

====================  ======  ==========
GM -> UB              MTE2    GM_TO_UB
GM -> L1              MTE2    GM_TO_L1
L1 -> L0A / L0B       MTE1    L1_TO_L0A / L1_TO_L0B (also :func:`msprof_py.kernels.cube.LoadData`)
UB -> GM              MTE3    UB_TO_GM
UB -> UB              V       UB_TO_UB
L0C -> GM             FIX     L0C_TO_GM (use :func:`Fixpipe`: it casts fp32 -> fp16 on the way)
====================  ======  ==========

``DataCopy(dst, src, count)`` moves ``count`` contiguous elements; ``DataCopy(dst, src,
DataCopyParams(blockCount, blockLen, srcStride, dstStride))`` moves ``blockCount`` bursts of
``blockLen`` 32-byte blocks, skipping ``srcStride`` / ``dstStride`` 32-byte blocks between
bursts (Ascend C units). The length must be a multiple of the on-chip buffer's alignment (32 B
for UB and L1, 512 B for L0A / L0B); ``DataCopyPad`` takes any byte length.
"""

from __future__ import annotations

from dataclasses import dataclass

from msprof_py.kernels import bf16, costs
from msprof_py.kernels.chip import Buffer
from msprof_py.kernels.core import Operand, current
from msprof_py.kernels.errors import AlignmentError, OperandError
from msprof_py.kernels.tensors import GlobalTensor, LocalTensor
from msprof_py.kernels.timeline import Pipe

_PATHS: dict[tuple[Buffer, Buffer], tuple[Pipe, costs.BandwidthTable]] = {
    (Buffer.GM, Buffer.UB): (Pipe.MTE2, costs.GM_TO_UB),
    (Buffer.GM, Buffer.L1): (Pipe.MTE2, costs.GM_TO_L1),
    (Buffer.L1, Buffer.L0A): (Pipe.MTE1, costs.L1_TO_L0A),
    (Buffer.L1, Buffer.L0B): (Pipe.MTE1, costs.L1_TO_L0B),
    (Buffer.UB, Buffer.GM): (Pipe.MTE3, costs.UB_TO_GM),
    (Buffer.UB, Buffer.UB): (Pipe.V, costs.UB_TO_UB),
    (Buffer.L0C, Buffer.GM): (Pipe.FIX, costs.L0C_TO_GM),
}


@dataclass(frozen=True)
class DataCopyParams:
    """Burst layout of a strided copy; lengths and strides in 32-byte blocks."""

    blockCount: int = 1
    blockLen: int = 0
    srcStride: int = 0
    dstStride: int = 0


def path(src: Operand, dst: Operand, what: str = "DataCopy") -> tuple[Pipe, costs.BandwidthTable]:
    """The pipe and bandwidth table of a move from ``src`` to ``dst``; raises if none exists."""
    try:
        return _PATHS[(src.buffer, dst.buffer)]
    except KeyError:
        known = ", ".join(f"{a.value}->{b.value}" for a, b in _PATHS)
        raise OperandError(
            f"{what}: no data path {src.buffer.value}->{dst.buffer.value} (has: {known})"
        ) from None


def _check_extent(tensor: Operand, extent: int, what: str, role: str) -> None:
    have = tensor.size * tensor.dtype.itemsize
    if extent > have:
        raise OperandError(f"{what}: {extent} B of {role} {tensor.name} exceed its {have} B")


def _move(
    dst: Operand,
    src: Operand,
    bursts: int,
    burst_bytes: int,
    src_gap: int,
    dst_gap: int,
    *,
    what: str,
    aligned: bool,
) -> None:
    core = current()
    pipe, table = path(src, dst, what)
    if aligned:
        for t in (src, dst):
            if isinstance(t, LocalTensor):
                align = core.chip.alignment[t.buffer]
                if burst_bytes % align:
                    raise AlignmentError(
                        f"{what} {src.buffer.value}->{dst.buffer.value} misaligned: "
                        f"{burst_bytes} B is not a multiple of {align} B "
                        f"({t.buffer.value} alignment); use DataCopyPad"
                    )
    for t in (src, dst):
        if isinstance(t, LocalTensor):
            t.check_aligned(what)
    src_extent = bursts * burst_bytes + (bursts - 1) * src_gap
    dst_extent = bursts * burst_bytes + (bursts - 1) * dst_gap
    _check_extent(src, src_extent, what, "source")
    _check_extent(dst, dst_extent, what, "destination")
    total = bursts * burst_bytes
    core.issue(
        pipe,
        what,
        table.cycles(total),
        reads=[(src, src_extent)],
        writes=[(dst, dst_extent)],
        nbytes=total,
        detail=f"{src.buffer.value}->{dst.buffer.value} {bursts}x{burst_bytes} B",
    )
    sb, db = src.bytes_view(), dst.bytes_view()
    if src_gap == dst_gap == 0:
        db[:total] = sb[:total]
        return
    for i in range(bursts):
        s0 = i * (burst_bytes + src_gap)
        d0 = i * (burst_bytes + dst_gap)
        db[d0 : d0 + burst_bytes] = sb[s0 : s0 + burst_bytes]


def DataCopy(dst: Operand, src: Operand, count: int | DataCopyParams) -> None:
    """Move ``count`` elements, or the bursts ``DataCopyParams`` describe, from src to dst."""
    if isinstance(count, DataCopyParams):
        p = count
        _move(
            dst,
            src,
            p.blockCount,
            p.blockLen * 32,
            p.srcStride * 32,
            p.dstStride * 32,
            what="DataCopy",
            aligned=True,
        )
        return
    if src.dtype.itemsize != dst.dtype.itemsize:
        raise OperandError(
            f"DataCopy: {src.name} ({src.dtype}) and {dst.name} ({dst.dtype}) differ in element "
            "size; DataCopy does not convert (use Cast or Fixpipe)"
        )
    _move(dst, src, 1, count * src.dtype.itemsize, 0, 0, what="DataCopy", aligned=True)


def DataCopyPad(dst: Operand, src: Operand, nbytes: int) -> None:
    """Move ``nbytes`` (any length) between GM and UB; costs as a DataCopy of that size."""
    _move(dst, src, 1, nbytes, 0, 0, what="DataCopyPad", aligned=False)


def Fixpipe(
    dst: GlobalTensor,
    src: LocalTensor,
    m: int,
    n: int,
    *,
    dst_row_stride: int | None = None,
) -> None:
    """Write an m x n fp32/int32 tile from L0C to GM (row-major), cast to ``dst``'s dtype,
    rows ``dst_row_stride`` elements apart in GM (default n). FIX pipe; cost by the bytes read
    from L0C."""
    core = current()
    if src.buffer is not Buffer.L0C or not isinstance(dst, GlobalTensor):
        raise OperandError("Fixpipe: moves an L0C tensor (CO1) to a GlobalTensor")
    src.check_aligned("Fixpipe")
    stride = n if dst_row_stride is None else dst_row_stride
    nbytes = m * n * src.dtype.itemsize
    _check_extent(src, nbytes, "Fixpipe", "source")
    dst_extent = ((m - 1) * stride + n) * dst.dtype.itemsize
    _check_extent(dst, dst_extent, "Fixpipe", "destination")
    core.issue(
        Pipe.FIX,
        "Fixpipe",
        costs.L0C_TO_GM.cycles(nbytes),
        reads=[(src, nbytes)],
        writes=[(dst, dst_extent)],
        nbytes=nbytes,
        detail=f"L0C->GM {m}x{n} {src.dtype}->{bf16.dtype_name(dst.dtype)}",
    )
    tile = src.data()[: m * n].reshape(m, n)
    out = dst.flat
    for r in range(m):
        out[r * stride : r * stride + n] = bf16.encode(tile[r], dst.dtype)
