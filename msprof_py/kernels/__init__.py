"""Custom kernels on the simulated NPU: an Ascend C-like DSL, a TIK facade, per-pipe timing.

Torch-free (numpy only). A kernel is a Python function run once per block by
:func:`launch`; inside it, Ascend C names do what they do on an AI Core, on simulated buffers::

    from msprof_py.kernels import *

    def add_custom(x, y, z, tile):                       # x, y, z arrive as GlobalTensor
        base = GetBlockIdx() * 4 * tile
        pipe = TPipe()
        qx, qy = TQue(TPosition.VECIN, 2), TQue(TPosition.VECIN, 2)
        qz = TQue(TPosition.VECOUT, 2)
        for q in (qx, qy, qz):
            pipe.InitBuffer(q, 2, tile * 2)             # 2 buffers = double buffering
        for i in range(4):
            xl, yl = qx.AllocTensor("float16"), qy.AllocTensor("float16")
            DataCopy(xl, x[base + i * tile:], tile)     # MTE2
            DataCopy(yl, y[base + i * tile:], tile)
            qx.EnQue(xl); qy.EnQue(yl)
            xl, yl = qx.DeQue(), qy.DeQue()
            zl = qz.AllocTensor("float16")
            Add(zl, xl, yl, tile)                       # V, 256-byte repeats
            qz.EnQue(zl); qx.FreeTensor(xl); qy.FreeTensor(yl)
            zl = qz.DeQue()
            DataCopy(z[base + i * tile:], zl, tile)     # MTE3
            qz.FreeTensor(zl)

    result = launch(add_custom, 8, x_np, y_np, z_np, 4096)   # z_np is written in place
    result.total_cycles, result.duration_us, result.pipe_busy(), result.instructions()

API
- :class:`Chip` (``Chip.load("ascend910b" | "ascend910a" | "ascend310p" | spec)``): cores,
  per-core buffer bytes (UB, L1, L0A, L0B, L0C from the device preset), alignment, event ids,
  cube fractals, clock.
- Tensors: :class:`GlobalTensor` (GM, over a numpy array; ``x[off:]`` slices by element),
  :class:`LocalTensor` (bytes of a core buffer; ``t[off:]``, ``GetValue`` / ``SetValue`` on the
  scalar pipe, ``reinterpret_cast``, ``numpy()``). Positions (:class:`TPosition`): VECIN /
  VECCALC / VECOUT -> UB, A1 / B1 -> L1, A2 -> L0A, B2 -> L0B, CO1 -> L0C, GM / CO2 -> GM.
- Buffers: :class:`TPipe` ``InitBuffer(que, num, bytes)`` / ``InitBuffer(tbuf, bytes)``,
  :class:`TQue` ``(position, depth)`` with ``AllocTensor`` / ``EnQue`` / ``DeQue`` /
  ``FreeTensor``, :class:`TBuf` ``Get``.
- Moves: ``DataCopy(dst, src, count | DataCopyParams(blockCount, blockLen, srcStride,
  dstStride))`` (GM->UB, GM->L1 on MTE2; UB->GM on MTE3; L1->L0A/L0B on MTE1; UB->UB on V),
  ``DataCopyPad`` (any byte length), ``LoadData`` (L1 -> L0A/L0B), ``Fixpipe`` (L0C -> GM on
  FIX, fp32 -> fp16, row stride).
- Cube: ``Mmad(c, a, b, m, k, n, accumulate=False)``: fp16 / bf16 -> fp32, int8 -> int32 in
  L0C.
- bfloat16 (:mod:`bf16`): ``"bfloat16"`` tensors hold bf16 bit patterns (``bf16.to_bf16`` /
  ``from_bf16`` on the host); vector ops compute in fp32 and round to nearest even.
- Row-wise vector ops (:mod:`rowops`): ``RowReduceMax`` / ``RowReduceSum`` / ``BroadcastRows``
  on ``rows x cols`` UB tiles (per-row statistics without scalar reads).
- Vector (count in elements): Add Sub Mul Div Max Min, Adds Muls Maxs Mins (scalar), Exp Ln
  Abs Sqrt Reciprocal Relu, Duplicate, Cast (round modes), ReduceMax ReduceMin ReduceSum;
  ``vector.vector_op`` builds more.
- Sync: ``SetFlag(HardEvent.MTE2_V, id)`` / ``WaitFlag``, ``PipeBarrier(Pipe.V | Pipe.ALL)``,
  ``GetBlockIdx()``, ``GetBlockNum()``, ``ScalarWork(cycles)``.
- Mix kernels (:mod:`mix`): ``launch(..., kernel_type="mix_aic_1_2")`` runs each block as an
  AIC + 2 AIVs with their own pipes and buffers; ``IsAic()`` / ``IsAiv()`` guard each side's
  code, ``GetSubBlockIdx()`` / ``GetSubBlockNum()`` split the vector work,
  ``CrossCoreSetFlag(id, pipe)`` / ``CrossCoreWaitFlag(id, pipe)`` order the GM hand-off
  (``mix.CROSS_CORE_CYCLES`` of latency [U]); ``BlockResult.sub_blocks``.
- :func:`launch` ``(kernel, block_dim, *args, chip=None, strict_sync=True, name=None,
  kernel_type=None)`` ->
  :class:`LaunchResult`: ``total_cycles``, ``duration_ns/us``, ``core_type`` (aiv / mix /
  aicore), ``cores``, ``waves``, ``blocks`` (:class:`BlockResult`: core, start, end,
  ``pipe_busy``, ``ratio(pipe)``, instructions), ``core_results``, ``pipe_busy()``,
  ``instructions(syncs=False)`` (:class:`InstrRecord`: block, core, pipe, name, start, end,
  nbytes, detail), ``outputs`` (the argument arrays by parameter name).
- :mod:`msprof_py.kernels.tik`: ``Tik()``, ``Tensor(dtype, shape, name, scope=scope_gm |
  scope_ubuf | scope_cbuf | scope_ca | scope_cb | scope_cc)``, ``for_range(b, e,
  block_num=n)``, ``data_move``, ``vec_add / vec_sub / vec_mul / vec_max / vec_exp / vec_muls
  / vec_adds / vec_dup / vec_conv / vec_reduce_max / vec_reduce_add`` (mask, repeat,
  strides), ``matmul``, ``fixpipe``, ``BuildCCE``,
  ``run(feed) -> LaunchResult``.

Pipes and timing (see :mod:`timeline`)
S (scalar), V (vector), M (cube), MTE1 (L1 -> L0A/L0B), MTE2 (GM -> core), MTE3 (core -> GM),
FIX (L0C -> GM). The scalar unit dispatches in program order (1 cycle per instruction); each
pipe runs its instructions in order, one at a time; pipes are ordered only by flags:
SetFlag fires when the source pipe has drained what was issued before it, WaitFlag holds the
destination pipe. EnQue / DeQue and FreeTensor / AllocTensor are implicit flags between the
producing and the consuming pipe, so a buffer is not refilled before it is freed and depth 2
overlaps MTE2 with V. An access that overlaps an in-flight access of another pipe with no flag
between them is a data race: an error (``strict_sync=True``, Ascend C) or an automatic wait
(``strict_sync=False``; TIK). Blocks run on vector cores (vector-only kernels, 48 on 910B) or
cube cores (a block touching L1 / L0 or M / MTE1 / FIX runs as a mix block on one of 24), in
waves when there are more blocks than cores; duration = the latest core finish.

Costs (see :mod:`costs`; sources named there)
- Data moves: interpolated (KiB per instruction -> GiB/s) tables from msKPP's published 910B1
  measurements: GM->L1 9.9 GiB/s at 1 KiB, 147.4 at 32 KiB, ~261 from 256 KiB; GM->UB 7.3 at
  1 KiB, ~77-78.5 from 24 KiB; UB->GM up to ~110; L0C->GM ~200; L1->L0A ~434; L1->L0B ~219;
  below 1 KiB a move costs what 1 KiB costs.
- Vector: one 256 B repeat per cycle; Exp, Ln, Div, Sqrt, Reciprocal 2 cycles per repeat;
  reductions as passes folding 256 B per repeat [modelled].
- Cube: one fractal per cycle (16x16x16 fp16, 16x32x16 int8; fp32 16x8x16 [U] on 910B).
- Scalar: 1 cycle per dispatch, 2 per GetValue / SetValue [U].
Numbers are cycles at the 1.8 GHz reference of the tables, converted to time with the chip's
clock; 910A / 310P reuse the 910B tables [U].

Errors (one line each, :class:`KernelError` subclasses, prefixed by the block): buffer overflow
("UB overflow: 200704 B requested, 196608 B available on ascend910b (InitBuffer of inQueueX:
2 x 100352 B after 0 B already in use)"), misaligned address or length (UB / L1 32 B, L0A /
L0B 512 B, L0C 64 B), data races, waits without a set, event ids out of range (0-7 on A2, 0-3
on 910A), queue misuse, bad operands.

Limits (not modelled)
Fractal data layouts (matrices are row-major everywhere; the cost is fractal-based); HBM / L2
contention between cores and L2 itself (each core gets its table bandwidth however many run, a
GM workspace costs HBM bandwidth); per-burst stride penalties (a strided copy costs its total
bytes); pipelining inside a pipe and V / M start-up latency; finite instruction queues between
the scalar unit and the pipes; instruction caches (icache_miss_rate is N/A); a mix kernel
launched without ``kernel_type`` is one core holding every buffer (the AIC / AIV split needs
``kernel_type="mix_aic_1_2"`` and guarded code); bias table, L0C -> L1 / UB paths; vector
masks other than contiguous element counts.
"""

from msprof_py.kernels.chip import Buffer, Chip
from msprof_py.kernels.core import current
from msprof_py.kernels.cube import LoadData, Mmad
from msprof_py.kernels.datacopy import DataCopy, DataCopyPad, DataCopyParams, Fixpipe
from msprof_py.kernels.errors import (
    AlignmentError,
    BufferOverflowError,
    KernelError,
    OperandError,
    QueueError,
    SyncError,
)
from msprof_py.kernels.launch import launch
from msprof_py.kernels.mix import (
    CrossCoreSetFlag,
    CrossCoreWaitFlag,
    GetSubBlockIdx,
    GetSubBlockNum,
    IsAic,
    IsAiv,
)
from msprof_py.kernels.queues import TBuf, TPipe, TQue
from msprof_py.kernels.results import (
    BlockResult,
    CoreResult,
    InstrRecord,
    LaunchResult,
    SubBlockResult,
)
from msprof_py.kernels.sync import (
    GetBlockIdx,
    GetBlockNum,
    PipeBarrier,
    ScalarWork,
    SetFlag,
    WaitFlag,
)
from msprof_py.kernels.tensors import GlobalTensor, LocalTensor, TPosition
from msprof_py.kernels.timeline import HardEvent, Pipe
from msprof_py.kernels.vector import (
    Abs,
    Add,
    Adds,
    Cast,
    Div,
    Duplicate,
    Exp,
    Ln,
    Max,
    Maxs,
    Min,
    Mins,
    Mul,
    Muls,
    Reciprocal,
    ReduceMax,
    ReduceMin,
    ReduceSum,
    Relu,
    Sqrt,
    Sub,
)

__all__ = [
    "Abs", "Add", "Adds", "AlignmentError", "BlockResult", "Buffer", "BufferOverflowError",
    "Cast", "Chip", "CoreResult", "CrossCoreSetFlag", "CrossCoreWaitFlag", "DataCopy",
    "DataCopyPad", "DataCopyParams", "Div", "Duplicate", "Exp", "Fixpipe", "GetBlockIdx",
    "GetBlockNum", "GetSubBlockIdx", "GetSubBlockNum", "GlobalTensor", "HardEvent", "InstrRecord",
    "IsAic", "IsAiv", "KernelError", "LaunchResult", "Ln", "LoadData", "LocalTensor", "Max",
    "Maxs", "Min", "Mins", "Mmad", "Mul", "Muls", "OperandError", "Pipe", "PipeBarrier",
    "QueueError", "Reciprocal", "ReduceMax", "ReduceMin", "ReduceSum", "Relu", "ScalarWork",
    "SetFlag", "Sqrt", "Sub", "SubBlockResult", "SyncError", "TBuf", "TPipe", "TPosition", "TQue",
    "WaitFlag", "current", "launch",
]  # fmt: skip
