"""Cube instructions: `LoadData` (L1 -> L0A / L0B on MTE1) and `Mmad` (M pipe, L0A x L0B -> L0C).

Matrices are row-major in every buffer: the fractal layouts the hardware uses (zZ, nZ, zN)
are not modelled; their cost is. ``Mmad(c, a, b, m, k, n)`` computes ``c = a @ b`` (or
``c += a @ b`` with ``accumulate=True``) for a ``m x k`` in L0A and ``k x n`` in L0B, in fp32
for fp16 inputs (int32 for int8), one (m0, k0, n0) fractal per cycle.
"""

from __future__ import annotations

import numpy as np

from msprof_py.kernels import bf16, costs
from msprof_py.kernels.chip import Buffer
from msprof_py.kernels.core import current
from msprof_py.kernels.datacopy import DataCopy
from msprof_py.kernels.errors import OperandError
from msprof_py.kernels.tensors import LocalTensor
from msprof_py.kernels.timeline import Pipe

#: accumulator dtype per input dtype
ACCUMULATOR = {np.dtype(np.float16): np.float32, np.dtype(np.float32): np.float32,
               np.dtype(np.int8): np.int32}  # fmt: skip


def LoadData(dst: LocalTensor, src: LocalTensor, count: int) -> None:
    """Move ``count`` elements from L1 to L0A or L0B (MTE1)."""
    if src.buffer is not Buffer.L1 or dst.buffer not in (Buffer.L0A, Buffer.L0B):
        raise OperandError(
            f"LoadData: moves L1 -> L0A / L0B, got {src.buffer.value} -> {dst.buffer.value}"
        )
    DataCopy(dst, src, count)


def Mmad(
    dst: LocalTensor,
    a: LocalTensor,
    b: LocalTensor,
    m: int,
    k: int,
    n: int,
    *,
    accumulate: bool = False,
) -> None:
    """``dst[m, n] (+)= a[m, k] @ b[k, n]`` on the cube (M pipe), accumulating in L0C."""
    core = current()
    for t, buf, role in ((a, Buffer.L0A, "a"), (b, Buffer.L0B, "b"), (dst, Buffer.L0C, "dst")):
        if not isinstance(t, LocalTensor) or t.buffer is not buf:
            raise OperandError(f"Mmad: {role} must be an {buf.value} tensor")
        t.check_aligned("Mmad")
    a_name, b_name = bf16.dtype_name(a.dtype), bf16.dtype_name(b.dtype)
    if a_name != b_name or (a_name != "bfloat16" and a.dtype not in ACCUMULATOR):
        raise OperandError(f"Mmad: a and b must share a cube dtype, got {a_name} and {b_name}")
    acc = np.dtype(np.float32 if a_name == "bfloat16" else ACCUMULATOR[a.dtype])
    if dst.dtype != acc:
        raise OperandError(f"Mmad: dst must be {acc} for {a_name} inputs, got {dst.dtype}")
    for t, need, role in ((a, m * k, "a"), (b, k * n, "b"), (dst, m * n, "dst")):
        if need > t.count:
            raise OperandError(f"Mmad: {role} needs {need} elements, {t.name} has {t.count}")
    name = a_name
    try:
        fractal = core.chip.fractal[name]
    except KeyError:
        raise OperandError(f"Mmad: {core.chip.name}'s cube has no {name} fractal") from None
    reads = [(a, a.dtype.itemsize * m * k), (b, b.dtype.itemsize * k * n)]
    out = (dst, acc.itemsize * m * n)
    core.issue(
        Pipe.M,
        "Mmad",
        costs.mmad_cycles(m, k, n, fractal),
        reads=[*reads, out] if accumulate else reads,
        writes=[out],
        nbytes=acc.itemsize * m * n,
        detail=f"m={m} k={k} n={n} {name}",
    )
    av = bf16.decode(a.data()[: m * k]).reshape(m, k).astype(acc)
    bv = bf16.decode(b.data()[: k * n]).reshape(k, n).astype(acc)
    cv = dst.data()[: m * n].reshape(m, n)
    product = av @ bv
    if accumulate:
        cv += product
    else:
        cv[...] = product
