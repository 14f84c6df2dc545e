"""A thin TIK-style facade over the same simulated core: build a program, then run it.

TIK (the older Python operator API) builds an instruction list at "compile" time::

    tik_instance = tik.Tik()
    x = tik_instance.Tensor("float16", (n,), name="x", scope=tik.scope_gm)
    ...
    with tik_instance.for_range(0, blocks, block_num=blocks) as b:
        x_ub = tik_instance.Tensor("float16", (tile,), name="x_ub", scope=tik.scope_ubuf)
        tik_instance.data_move(x_ub, x[b * tile], 0, 1, tile * 2 // 32, 0, 0)
        tik_instance.vec_add(128, z_ub, x_ub, y_ub, tile // 128, 8, 8, 8)
        tik_instance.data_move(z[b * tile], z_ub, 0, 1, tile * 2 // 32, 0, 0)
    tik_instance.BuildCCE(kernel_name="add", inputs=[x, y], outputs=[z])
    result = tik_instance.run({"x": x_np, "y": y_np})   # a LaunchResult; result.outputs["z"]

Loop variables are symbolic (:class:`Expr`); tensors in on-chip scopes are placed statically
when declared (capacity is checked then, with the same one-line overflow error); a top-level
``for_range(..., block_num=n)`` becomes the launch's blocks. Instructions map onto the Ascend C
layer one to one (``data_move`` -> DataCopy with burst parameters, ``vec_*`` -> the vector op
with ``repeat_times`` repeats (``vec_conv`` -> Cast, ``vec_reduce_max`` / ``vec_reduce_add`` ->
ReduceMax / ReduceSum), ``matmul`` -> Mmad, ``fixpipe`` -> Fixpipe), so the same kernel
costs the same cycles in either spelling. TIK inserts synchronisation itself: the program runs
with automatic synchronisation (a later instruction waits for an in-flight one it conflicts
with) instead of strict flags. Only contiguous repeat strides are supported.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from msprof_py.kernels import costs, vector
from msprof_py.kernels.chip import Buffer, Chip
from msprof_py.kernels.core import current
from msprof_py.kernels.cube import Mmad
from msprof_py.kernels.datacopy import DataCopy, DataCopyParams, Fixpipe
from msprof_py.kernels.errors import BufferOverflowError, KernelError, OperandError
from msprof_py.kernels.launch import launch
from msprof_py.kernels.results import LaunchResult
from msprof_py.kernels.tensors import (
    POSITION_BUFFER,
    GlobalTensor,
    LocalTensor,
    TPosition,
    as_dtype,
)

scope_gm = "scope_gm"
scope_ubuf = "scope_ubuf"
scope_cbuf = "scope_cbuf"
scope_ca = "scope_ca"
scope_cb = "scope_cb"
scope_cc = "scope_cc"

_SCOPE_POSITION = {
    scope_ubuf: TPosition.VECCALC,
    scope_cbuf: TPosition.A1,
    scope_ca: TPosition.A2,
    scope_cb: TPosition.B2,
    scope_cc: TPosition.CO1,
}

#: TIK vec_conv round modes -> Ascend C Cast round modes
_TIK_ROUND = {
    "": "CAST_NONE", "none": "CAST_NONE", "round": "CAST_RINT", "floor": "CAST_FLOOR",
    "ceil": "CAST_CEIL", "ceiling": "CAST_CEIL", "away-zero": "CAST_ROUND", "to-zero": "CAST_TRUNC",
}  # fmt: skip

_VARS = itertools.count()
Env = dict[int, int]


class Expr:
    """An integer expression over loop variables (what ``for_range`` yields)."""

    def __init__(self, fn: Callable[[Env], int], text: str) -> None:
        self._fn = fn
        self.text = text

    @staticmethod
    def of(value: Expr | int) -> Expr:
        """Wrap an int as a constant expression."""
        if isinstance(value, Expr):
            return value
        v = int(value)
        return Expr(lambda env: v, str(v))

    def eval(self, env: Env) -> int:
        """The value with loop variables bound by ``env``."""
        return self._fn(env)

    def _op(self, other: Expr | int, fn: Callable[[int, int], int], sym: str) -> Expr:
        o = Expr.of(other)
        return Expr(lambda env: fn(self.eval(env), o.eval(env)), f"({self.text} {sym} {o.text})")

    def __add__(self, other: Expr | int) -> Expr:
        return self._op(other, lambda a, b: a + b, "+")

    __radd__ = __add__

    def __mul__(self, other: Expr | int) -> Expr:
        return self._op(other, lambda a, b: a * b, "*")

    __rmul__ = __mul__

    def __sub__(self, other: Expr | int) -> Expr:
        return self._op(other, lambda a, b: a - b, "-")

    def __rsub__(self, other: Expr | int) -> Expr:
        return Expr.of(other)._op(self, lambda a, b: a - b, "-")

    def __floordiv__(self, other: Expr | int) -> Expr:
        return self._op(other, lambda a, b: a // b, "//")

    def __repr__(self) -> str:
        return f"Expr({self.text})"


@dataclass
class TikTensor:
    """A TIK tensor (or a view from element ``start`` on): GM, or placed in an on-chip scope."""

    dtype: np.dtype
    shape: tuple[int, ...]
    name: str
    scope: str
    #: byte offset in the scope's buffer (on-chip scopes)
    offset: int = 0
    start: Expr | None = None

    @property
    def size(self) -> int:
        """Elements of the whole tensor."""
        return math.prod(self.shape)

    def __getitem__(self, index: Expr | int | slice) -> TikTensor:
        if isinstance(index, slice):
            index = index.start or 0
        start = Expr.of(index) if self.start is None else self.start + index
        return TikTensor(self.dtype, self.shape, self.name, self.scope, self.offset, start)


class Tik:
    """Builds a TIK program for ``chip`` (default ascend910b); run it with :meth:`run`."""

    def __init__(self, chip: str | Chip | None = None) -> None:
        self.chip = Chip.load(chip)
        self._body: list[Any] = []
        self._stack: list[list[Any]] = [self._body]
        self._used: dict[Buffer, int] = {}
        self._gm: dict[str, TikTensor] = {}
        self._block: tuple[int, int] | None = None  # (var id, block_num)
        self.kernel_name = "tik_kernel"
        self.inputs: list[TikTensor] = []
        self.outputs: list[TikTensor] = []

    # ---- declarations ----------------------------------------------------------------------

    def Tensor(
        self, dtype: str, shape: Sequence[int], name: str = "", scope: str = scope_gm
    ) -> TikTensor:
        """Declare a tensor; on-chip scopes place it now (and check the buffer's capacity)."""
        dt = as_dtype(dtype)
        shape = tuple(int(s) for s in shape)
        name = name or f"t{len(self._gm) + sum(self._used.values())}"
        if scope == scope_gm:
            tensor = TikTensor(dt, shape, name, scope)
            self._gm[name] = tensor
            return tensor
        if scope not in _SCOPE_POSITION:
            raise OperandError(f"Tensor {name}: unknown scope {scope!r}")
        buffer = POSITION_BUFFER[_SCOPE_POSITION[scope]]
        align = self.chip.alignment[buffer]
        used = self._used.get(buffer, 0)
        offset = -(-used // align) * align
        nbytes = math.prod(shape) * dt.itemsize
        capacity = self.chip.capacity[buffer]
        if offset + nbytes > capacity:
            raise BufferOverflowError(
                f"{buffer.value} overflow: {offset + nbytes} B requested, {capacity} B available "
                f"on {self.chip.name} (Tensor {name}: {nbytes} B after {used} B already in use)"
            )
        self._used[buffer] = offset + nbytes
        return TikTensor(dt, shape, name, scope, offset)

    @contextlib.contextmanager
    def for_range(self, begin: int, end: int, block_num: int = 1) -> Iterator[Expr]:
        """A loop; ``block_num > 1`` (top level only) spreads its iterations over blocks."""
        var = next(_VARS)
        expr = Expr(lambda env: env[var], f"i{var}")
        body: list[Any] = []
        if block_num > 1:
            if len(self._stack) > 1 or self._block is not None:
                raise KernelError("for_range: block_num > 1 only on one top-level loop")
            if (begin, end) != (0, block_num):
                raise KernelError("for_range: a block loop must run 0 .. block_num")
            self._block = (var, block_num)
        self._stack[-1].append(("loop", var, int(begin), int(end), block_num, body))
        self._stack.append(body)
        try:
            yield expr
        finally:
            self._stack.pop()

    def _emit(self, fn: Callable[[Env], None]) -> None:
        self._stack[-1].append(("op", fn))

    # ---- operand resolution at run time ----------------------------------------------------

    def _resolve(self, t: TikTensor, env: Env, gm: dict[str, GlobalTensor]) -> Any:
        start = 0 if t.start is None else t.start.eval(env)
        if t.scope == scope_gm:
            return gm[t.name][start:]
        core = current()
        local = LocalTensor(core, _SCOPE_POSITION[t.scope], t.offset, t.dtype, t.size, t.name)
        return local[start:] if start else local

    # ---- instructions ----------------------------------------------------------------------

    def data_move(
        self,
        dst: TikTensor,
        src: TikTensor,
        sid: int,
        nburst: int,
        burst: int,
        src_stride: int,
        dst_stride: int,
    ) -> None:
        """Move ``nburst`` bursts of ``burst`` 32-byte blocks (strides in 32-byte blocks)."""
        params = DataCopyParams(nburst, burst, src_stride, dst_stride)

        def op(env: Env) -> None:
            d, s = self._resolve(dst, env, self._env_gm), self._resolve(src, env, self._env_gm)
            DataCopy(d, s, params)

        self._emit(op)

    def _check_vec(
        self, name: str, mask: int, tensors: Sequence[TikTensor], repeat: int,
        strides: Sequence[int],
    ) -> None:  # fmt: skip
        """One repeat holds ``mask`` elements of the widest operand; strides are contiguous."""
        width = max(t.dtype.itemsize for t in tensors)
        lanes = self.chip.repeat_bytes // width
        if not 1 <= mask <= lanes:
            raise OperandError(f"vec_{name}: mask {mask} outside 1..{lanes} for {tensors[0].dtype}")
        for t, stride in zip(tensors, strides, strict=True):
            if stride * 32 != mask * t.dtype.itemsize and repeat > 1:
                raise OperandError(
                    f"vec_{name}: only contiguous repeat strides are supported "
                    f"({mask * t.dtype.itemsize // 32} blocks for mask {mask}), got {stride}"
                )

    def _vec(
        self,
        name: str,
        mask: int,
        dst: TikTensor,
        srcs: Sequence[TikTensor],
        repeat: int,
        strides: Sequence[int],
        fn: Callable[..., Any],
    ) -> None:
        self._check_vec(name, mask, (dst, *srcs), repeat, strides)
        op_name = name.capitalize()
        cycles = repeat * costs.VECTOR_CYCLES_PER_REPEAT.get(op_name, 1)

        def op(env: Env) -> None:
            d = self._resolve(dst, env, self._env_gm)
            ss = [self._resolve(s, env, self._env_gm) for s in srcs]
            vector.vector_op(op_name, d, ss, mask * repeat, fn, cycles=cycles)

        self._emit(op)

    def vec_add(
        self, mask, dst, src0, src1, repeat_times, dst_rep_stride, src0_rep_stride, src1_rep_stride
    ):  # type: ignore[no-untyped-def]
        """dst = src0 + src1 over ``repeat_times`` repeats of ``mask`` elements."""
        strides = (dst_rep_stride, src0_rep_stride, src1_rep_stride)
        self._vec("add", mask, dst, (src0, src1), repeat_times, strides, np.add)

    def vec_sub(
        self, mask, dst, src0, src1, repeat_times, dst_rep_stride, src0_rep_stride, src1_rep_stride
    ):  # type: ignore[no-untyped-def]
        """dst = src0 - src1."""
        strides = (dst_rep_stride, src0_rep_stride, src1_rep_stride)
        self._vec("sub", mask, dst, (src0, src1), repeat_times, strides, np.subtract)

    def vec_mul(
        self, mask, dst, src0, src1, repeat_times, dst_rep_stride, src0_rep_stride, src1_rep_stride
    ):  # type: ignore[no-untyped-def]
        """dst = src0 * src1."""
        strides = (dst_rep_stride, src0_rep_stride, src1_rep_stride)
        self._vec("mul", mask, dst, (src0, src1), repeat_times, strides, np.multiply)

    def vec_max(
        self, mask, dst, src0, src1, repeat_times, dst_rep_stride, src0_rep_stride, src1_rep_stride
    ):  # type: ignore[no-untyped-def]
        """dst = max(src0, src1)."""
        strides = (dst_rep_stride, src0_rep_stride, src1_rep_stride)
        self._vec("max", mask, dst, (src0, src1), repeat_times, strides, np.maximum)

    def vec_exp(self, mask, dst, src, repeat_times, dst_rep_stride, src_rep_stride):  # type: ignore[no-untyped-def]
        """dst = exp(src)."""
        self._vec("exp", mask, dst, (src,), repeat_times, (dst_rep_stride, src_rep_stride), np.exp)

    def vec_muls(self, mask, dst, src, scalar, repeat_times, dst_rep_stride, src_rep_stride):  # type: ignore[no-untyped-def]
        """dst = src * scalar."""
        s = src.dtype.type(scalar)
        strides = (dst_rep_stride, src_rep_stride)
        self._vec("muls", mask, dst, (src,), repeat_times, strides, lambda x: x * s)

    def vec_adds(self, mask, dst, src, scalar, repeat_times, dst_rep_stride, src_rep_stride):  # type: ignore[no-untyped-def]
        """dst = src + scalar."""
        s = src.dtype.type(scalar)
        strides = (dst_rep_stride, src_rep_stride)
        self._vec("adds", mask, dst, (src,), repeat_times, strides, lambda x: x + s)

    def vec_dup(self, mask, dst, scalar, repeat_times, dst_rep_stride):  # type: ignore[no-untyped-def]
        """dst = scalar."""
        count = mask * repeat_times
        s = dst.dtype.type(scalar)
        self._vec(
            "duplicate", mask, dst, (), repeat_times, (dst_rep_stride,),
            lambda: np.full(count, s, dtype=dst.dtype),
        )  # fmt: skip

    def vec_conv(self, mask, round_mode, dst, src, repeat_times, dst_rep_stride, src_rep_stride):  # type: ignore[no-untyped-def]
        """dst = src converted to dst's dtype (Ascend C ``Cast``); ``round_mode`` '' / 'none',
        'round', 'floor', 'ceil' / 'ceiling', 'away-zero', 'to-zero'."""
        mode = _TIK_ROUND.get(round_mode)
        if mode is None:
            raise OperandError(
                f"vec_conv: unknown round_mode {round_mode!r} ({', '.join(_TIK_ROUND)})"
            )
        self._check_vec("conv", mask, (dst, src), repeat_times, (dst_rep_stride, src_rep_stride))

        def op(env: Env) -> None:
            d, x = self._resolve(dst, env, self._env_gm), self._resolve(src, env, self._env_gm)
            vector.Cast(d, x, mode, mask * repeat_times)

        self._emit(op)

    def _vec_reduce(self, name, fn, mask, dst, src, repeat_times, src_rep_stride) -> None:  # type: ignore[no-untyped-def]
        self._check_vec(name, mask, (src,), repeat_times, (src_rep_stride,))

        def op(env: Env) -> None:
            d, x = self._resolve(dst, env, self._env_gm), self._resolve(src, env, self._env_gm)
            fn(d, x, None, mask * repeat_times)

        self._emit(op)

    def vec_reduce_max(
        self, mask, dst, src, work_tensor, repeat_times, src_rep_stride, cal_index=False
    ):  # type: ignore[no-untyped-def]
        """dst[0] = max over ``repeat_times`` repeats of ``mask`` elements (Ascend C
        ``ReduceMax``; ``work_tensor`` is accepted, unused; no index output)."""
        if cal_index:
            raise OperandError("vec_reduce_max: cal_index=True is not modelled")
        self._vec_reduce(
            "reduce_max", vector.ReduceMax, mask, dst, src, repeat_times, src_rep_stride
        )

    def vec_reduce_add(self, mask, dst, src, work_tensor, repeat_times, src_rep_stride):  # type: ignore[no-untyped-def]
        """dst[0] = sum over ``repeat_times`` repeats of ``mask`` elements (``ReduceSum``)."""
        self._vec_reduce(
            "reduce_add", vector.ReduceSum, mask, dst, src, repeat_times, src_rep_stride
        )

    def matmul(
        self, dst: TikTensor, a: TikTensor, b: TikTensor, m: int, k: int, n: int,
        init_l1out: bool = True,
    ) -> None:  # fmt: skip
        """dst (scope_cc) (+)= a (scope_ca) @ b (scope_cb); ``init_l1out=False`` accumulates."""

        def op(env: Env) -> None:
            d, x, y = (self._resolve(t, env, self._env_gm) for t in (dst, a, b))
            Mmad(d, x, y, m, k, n, accumulate=not init_l1out)

        self._emit(op)

    def fixpipe(self, dst: TikTensor, src: TikTensor, m: int, n: int) -> None:
        """Write an m x n tile from scope_cc to GM (cast to dst's dtype)."""

        def op(env: Env) -> None:
            Fixpipe(
                self._resolve(dst, env, self._env_gm), self._resolve(src, env, self._env_gm), m, n
            )

        self._emit(op)

    # ---- build and run ---------------------------------------------------------------------

    def BuildCCE(
        self, kernel_name: str, inputs: Sequence[TikTensor], outputs: Sequence[TikTensor]
    ) -> None:
        """Close the program: name it and list its GM inputs and outputs."""
        for t in (*inputs, *outputs):
            if t.scope != scope_gm:
                raise KernelError(f"BuildCCE: {t.name} is not a scope_gm tensor")
        self.kernel_name = kernel_name
        self.inputs = list(inputs)
        self.outputs = list(outputs)

    def run(self, feed: dict[str, np.ndarray]) -> LaunchResult:
        """Run the built program with input arrays by name; outputs start as zeros and come
        back in ``result.outputs`` by name."""
        arrays: dict[str, np.ndarray] = {}
        for t in self.inputs:
            if t.name not in feed:
                raise KernelError(f"run: no array for input {t.name}")
            arrays[t.name] = np.ascontiguousarray(feed[t.name], dtype=t.dtype).reshape(t.shape)
        for t in self.outputs:
            arrays[t.name] = np.zeros(t.shape, dtype=t.dtype)
        block_var, block_num = self._block if self._block else (-1, 1)

        def kernel(*gms: GlobalTensor) -> None:
            self._env_gm = {g.name: g for g in gms}
            env: Env = {}
            self._exec(self._body, env, block_var)

        gm_args = [GlobalTensor(a, n) for n, a in arrays.items()]
        result = launch(kernel, block_num, *gm_args, chip=self.chip, strict_sync=False,
                        name=self.kernel_name)  # fmt: skip
        result.outputs = {t.name: arrays[t.name] for t in self.outputs}
        return result

    _env_gm: dict[str, GlobalTensor]

    def _exec(self, body: list[Any], env: Env, block_var: int) -> None:
        from msprof_py.kernels.sync import GetBlockIdx

        for node in body:
            if node[0] == "op":
                node[1](env)
                continue
            _, var, begin, end, _block_num, inner = node
            if var == block_var:
                env[var] = GetBlockIdx()
                self._exec(inner, env, block_var)
                continue
            for i in range(begin, end):
                env[var] = i
                self._exec(inner, env, block_var)
