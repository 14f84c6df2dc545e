"""Vector instructions (V pipe) on UB tensors, Ascend C spelling: ``Add(dst, src0, src1, n)``.

Every operand must be a UB tensor (VECIN / VECCALC / VECOUT) at a 32-byte aligned address
holding at least ``count`` elements. Work is processed in 256-byte repeats (see
:mod:`costs` for cycles per repeat); values are computed with numpy in the operands' dtype
(fp16 arithmetic rounds to float16 after every op).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from msprof_py.kernels import bf16, costs
from msprof_py.kernels.chip import Buffer
from msprof_py.kernels.core import current
from msprof_py.kernels.errors import OperandError
from msprof_py.kernels.tensors import LocalTensor
from msprof_py.kernels.timeline import Pipe


def _check(op: str, tensors: Sequence[LocalTensor], count: int) -> None:
    if count < 0:
        raise OperandError(f"{op}: count must be >= 0, got {count}")
    for t in tensors:
        if not isinstance(t, LocalTensor) or t.buffer is not Buffer.UB:
            where = t.buffer.value if hasattr(t, "buffer") else type(t).__name__
            raise OperandError(f"{op}: operands must be UB tensors, got {where}")
        t.check_aligned(op)
        if count > t.count:
            raise OperandError(f"{op}: count {count} exceeds {t.name}'s {t.count} elements")


def vector_op(
    op: str,
    dst: LocalTensor,
    srcs: Sequence[LocalTensor],
    count: int,
    fn: Callable[..., Any],
    *,
    cycles: int | None = None,
    dst_count: int | None = None,
) -> None:
    """Issue one V instruction: ``dst[:dst_count] = fn(*(s[:count] for s in srcs))``.

    ``cycles`` overrides the repeat-based cost (TIK passes its explicit repeat count)."""
    core = current()
    out_n = count if dst_count is None else dst_count
    _check(op, srcs, count)
    _check(op, [dst], out_n)
    if cycles is None:
        width = max(t.dtype.itemsize for t in (dst, *srcs))
        cycles = costs.vector_cycles(op, count, width, core.chip.repeat_bytes)
    core.issue(
        Pipe.V,
        op,
        cycles,
        reads=[(s, count * s.dtype.itemsize) for s in srcs],
        writes=[(dst, out_n * dst.dtype.itemsize)],
        nbytes=count * dst.dtype.itemsize,
        detail=f"{count} x {bf16.dtype_name(dst.dtype)}",
    )
    with np.errstate(all="ignore"):
        result = fn(*(bf16.decode(s.data()[:count]) for s in srcs))
        dst.data()[:out_n] = bf16.encode(result, dst.dtype)


def _binary(op: str, fn: Callable[[Any, Any], Any]) -> Callable[..., None]:
    def inst(dst: LocalTensor, src0: LocalTensor, src1: LocalTensor, count: int) -> None:
        vector_op(op, dst, [src0, src1], count, fn)

    inst.__name__ = inst.__qualname__ = op
    inst.__doc__ = f"``dst[i] = {op.lower()}(src0[i], src1[i])`` for i < count."
    return inst


def _scalar(op: str, fn: Callable[[Any, Any], Any]) -> Callable[..., None]:
    def inst(dst: LocalTensor, src: LocalTensor, scalar: float, count: int) -> None:
        s = np.float32(scalar) if bf16.is_bf16(src.dtype) else src.dtype.type(scalar)
        vector_op(op, dst, [src], count, lambda x: fn(x, s))

    inst.__name__ = inst.__qualname__ = op
    inst.__doc__ = f"``dst[i] = {op.lower()}(src[i], scalar)`` for i < count."
    return inst


def _unary(op: str, fn: Callable[[Any], Any]) -> Callable[..., None]:
    def inst(dst: LocalTensor, src: LocalTensor, count: int) -> None:
        vector_op(op, dst, [src], count, fn)

    inst.__name__ = inst.__qualname__ = op
    inst.__doc__ = f"``dst[i] = {op.lower()}(src[i])`` for i < count."
    return inst


Add = _binary("Add", np.add)
Sub = _binary("Sub", np.subtract)
Mul = _binary("Mul", np.multiply)
Div = _binary("Div", np.divide)
Max = _binary("Max", np.maximum)
Min = _binary("Min", np.minimum)
Adds = _scalar("Adds", np.add)
Muls = _scalar("Muls", np.multiply)
Maxs = _scalar("Maxs", np.maximum)
Mins = _scalar("Mins", np.minimum)
Exp = _unary("Exp", np.exp)
Ln = _unary("Ln", np.log)
Abs = _unary("Abs", np.abs)
Sqrt = _unary("Sqrt", np.sqrt)
Reciprocal = _unary("Reciprocal", lambda x: np.divide(x.dtype.type(1), x))
Relu = _unary("Relu", lambda x: np.maximum(x, x.dtype.type(0)))


def Duplicate(dst: LocalTensor, scalar: float, count: int) -> None:
    """Fill ``dst[:count]`` with ``scalar``."""
    if bf16.is_bf16(dst.dtype):
        vector_op("Duplicate", dst, [], count, lambda: np.full(count, scalar, np.float32))
        return
    value = dst.dtype.type(scalar)
    vector_op("Duplicate", dst, [], count, lambda: np.full(count, value, dtype=dst.dtype))


_ROUND = {
    "CAST_NONE": np.rint,
    "CAST_RINT": np.rint,
    "CAST_ROUND": lambda x: np.sign(x) * np.floor(np.abs(x) + 0.5),
    "CAST_FLOOR": np.floor,
    "CAST_CEIL": np.ceil,
    "CAST_TRUNC": np.trunc,
}


def Cast(dst: LocalTensor, src: LocalTensor, round_mode: str, count: int) -> None:
    """Convert ``count`` elements to ``dst``'s dtype; ``round_mode`` (CAST_RINT, CAST_FLOOR,
    CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_NONE) applies when converting to an integer."""
    if round_mode not in _ROUND:
        raise OperandError(f"Cast: unknown round mode {round_mode!r} ({', '.join(_ROUND)})")
    to_int = (
        np.issubdtype(dst.dtype, np.integer)
        and not bf16.is_bf16(dst.dtype)
        and (np.issubdtype(src.dtype, np.floating) or bf16.is_bf16(src.dtype))
    )
    rnd = _ROUND[round_mode]
    vector_op("Cast", dst, [src], count, lambda x: rnd(x) if to_int else x)


def _reduce(op: str, fn: Callable[[Any], Any]) -> Callable[..., None]:
    def inst(
        dst: LocalTensor, src: LocalTensor, work: LocalTensor | None = None, count: int = 0
    ) -> None:
        core = current()
        cycles = costs.reduce_cycles(count, src.dtype.itemsize, core.chip.repeat_bytes)
        if count < 1:
            raise OperandError(f"{op}: count must be >= 1")
        vector_op(op, dst, [src], count, lambda x: np.asarray([fn(x)]), cycles=cycles, dst_count=1)

    inst.__name__ = inst.__qualname__ = op
    inst.__doc__ = f"``dst[0] = {op[6:].lower()}(src[:count])`` (``work`` is accepted, unused)."
    return inst


ReduceMax = _reduce("ReduceMax", np.max)
ReduceMin = _reduce("ReduceMin", np.min)
ReduceSum = _reduce("ReduceSum", lambda x: np.sum(x, dtype=x.dtype))
