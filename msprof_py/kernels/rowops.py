"""Row-wise vector instructions on a ``rows x cols`` tile in UB (V pipe), for softmax-like
kernels that keep per-row statistics in UB tensors instead of scalar registers.

- ``RowReduceMax(dst, src, rows, cols)`` / ``RowReduceSum``: ``dst[r] = max / sum(src[r, :])``
  (Ascend C does this with WholeReduceMax / WholeReduceSum passes).
- ``BroadcastRows(dst, src, rows, cols)``: ``dst[r, :] = src[r]`` (Ascend C: Brcb, then
  copies), so a per-row statistic can enter an elementwise ``Sub`` / ``Mul`` / ``Div``.

Costs [U: modelled, not measured]: a row reduction costs what ``rows`` separate reductions of
``cols`` elements cost (:func:`costs.reduce_cycles` each: passes of 256 B repeats folding to one
element), in one instruction; a broadcast costs the repeats of the ``rows x cols`` it writes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from msprof_py.kernels import costs
from msprof_py.kernels.core import current
from msprof_py.kernels.errors import OperandError
from msprof_py.kernels.tensors import LocalTensor
from msprof_py.kernels.vector import vector_op


def _rows(op: str, rows: int, cols: int) -> None:
    if rows < 1 or cols < 1:
        raise OperandError(f"{op}: rows and cols must be >= 1, got {rows} x {cols}")


def _row_reduce(op: str, fn: Callable[[Any], Any]) -> Callable[..., None]:
    def inst(dst: LocalTensor, src: LocalTensor, rows: int, cols: int) -> None:
        _rows(op, rows, cols)
        per_row = costs.reduce_cycles(cols, src.dtype.itemsize, current().chip.repeat_bytes)
        vector_op(
            op,
            dst,
            [src],
            rows * cols,
            lambda x: fn(x.reshape(rows, cols)),
            cycles=rows * per_row,
            dst_count=rows,
        )

    inst.__name__ = inst.__qualname__ = op
    inst.__doc__ = f"``dst[r] = {op[9:].lower()}(src[r * cols : (r + 1) * cols])`` for r < rows."
    return inst


RowReduceMax = _row_reduce("RowReduceMax", lambda x: x.max(axis=1))
RowReduceSum = _row_reduce("RowReduceSum", lambda x: x.sum(axis=1, dtype=x.dtype))


def BroadcastRows(dst: LocalTensor, src: LocalTensor, rows: int, cols: int) -> None:
    """``dst[r * cols : (r + 1) * cols] = src[r]`` for r < rows."""
    _rows("BroadcastRows", rows, cols)
    vector_op(
        "BroadcastRows",
        dst,
        [src],
        rows,
        lambda x: np.repeat(x, cols),
        dst_count=rows * cols,
        cycles=costs.vector_cycles("BroadcastRows", rows * cols, dst.dtype.itemsize),
    )
