"""FlashAttention on the AI Core: the tile model of a ``FlashAttentionScore(Grad)`` kernel.

On A2 (split AI Core) the fused attention kernel is a MIX_AIC kernel: one cube core and its two
vector cores work on one *unit* of the problem. The forward pass gives each unit a block of
``BLOCK_Q`` query rows of one (batch, head); the unit streams the key/value blocks of
``BLOCK_KV`` rows through L1, and for each block the cube computes the scores ``S = Q K^T``,
the vector cores run the online softmax (running max and sum, rescaling the accumulator), and
the cube adds ``P V`` to the output. The backward pass (FlashAttention-2) gives each unit a
key/value block and streams the query blocks: five matmuls per block pair (``S``, ``dP``,
``dV``, ``dK``, ``dQ``), the softmax gradient on the vector cores, and ``dQ`` accumulated across
units in fp32.

Costs, per kernel:

* **cube**: MMAD cycles of every block-pair matmul on fractal-padded tiles, units spread over
  the cube cores in waves (``ceil(units / cores)``), over the cube efficiency;
* **vector**: the softmax (forward) or softmax-gradient (backward) instructions over every
  fp32 score of the unit, on the unit's two vector cores;
* **pipeline**: cube and vector overlap block by block (double buffering), so a unit costs the
  busier of the two plus one block of the other (the fill and drain of the pipeline);
* **memory**: HBM reads each input and writes each output once; the re-reads of K/V (forward)
  or Q/dO/O (backward) by the other units of the same head are served by L2 when the heads in
  flight fit in it (from HBM when they do not); the score blocks cross between the cube and the
  vector cores through a workspace in L2 (``S`` fp32 and ``P`` in the input dtype, written and
  read once each, twice as many tensors in the backward), and the backward's fp32 ``dQ``
  partial sums are accumulated there. Memory time is the slower of the HBM and L2 transfers.

The shim (``torch_npu.npu_fusion_attention``) and the analysis (which re-costs an attention
written as separate kernels) share :func:`flash_attention_cost`, so an estimate and the kernel
the recommended change launches are the same number. Torch-free.

Nothing of size ``Sq x Skv`` is ever stored in HBM, which is where the fused kernel's memory
and time advantage over the naive path (BatchMatMul, SoftmaxV2, BatchMatMul through HBM) comes
from on long sequences.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from msprof_py.device.costmodel import Bound, KernelCost, cube_dtype, vector_cost
from msprof_py.device.dtypes import itemsize
from msprof_py.device.records import TaskType
from msprof_py.device.spec import DeviceSpec

#: query rows per forward unit and key/value rows per block (CANN's FlashAttentionScore tiling
#: uses 128-row base blocks for head dims up to 128 on A2; estimate)
BLOCK_Q = 128
BLOCK_KV = 128
#: vector instructions per fp32 score: online softmax (scale, mask, max, sub, exp, sum,
#: rescale) and its gradient (the recomputed exp, dP - D, times P, scale)
SOFTMAX_OPS = 10.0
SOFTMAX_GRAD_OPS = 14.0
#: vector cores working with one cube core in a MIX_AIC unit (1:2 on A2)
VECTOR_PER_UNIT = 2
#: last dim of the fp32 softmax_max / softmax_sum outputs (torch_npu's SOFTMAXMAX_LAST_DIMSHAPE)
STAT_WIDTH = 8
#: fp32 softmax statistics (row max and row sum) stored per query row
_STAT_BYTES_PER_ROW = 2 * STAT_WIDTH * 4


@dataclass(frozen=True, slots=True)
class FlashShape:
    """One fused attention: ``heads`` (batch x heads) of [Sq, D] queries against [Skv, D] keys
    and [Skv, Dv] values; ``kv_share`` = key/value heads per query head (GQA < 1);
    ``density`` = the share of block pairs a sparse or causal mask leaves to compute."""

    heads: int
    sq: int
    skv: int
    d: int
    dv: int
    dtype: str = "float16"
    kv_share: float = 1.0
    density: float = 1.0

    def __post_init__(self) -> None:
        if min(self.heads, self.sq, self.skv, self.d, self.dv) < 0:
            raise ValueError(f"negative attention dimension: {self}")
        if not 0.0 <= self.density <= 1.0 or not 0.0 < self.kv_share <= 1.0:
            raise ValueError(f"density must be in [0, 1] and kv_share in (0, 1]: {self}")


@dataclass(frozen=True, slots=True)
class FlashTiling:
    """How a fused attention is cut into units, and what one unit does (cycles, bytes)."""

    units: int
    units_per_head: int
    block_dim: int
    waves: int
    unit_cube_cycles: float
    unit_vector_cycles: float
    block_cube_cycles: float
    block_vector_cycles: float
    hbm_bytes: int
    #: L2 traffic through the cube cores' ports (K/V or Q/dO re-reads, their side of the
    #: score workspace, dQ partials) and through the vector cores' ports (their side)
    l2_cube_bytes: int
    l2_vector_bytes: int


def _pad(x: int, multiple: int) -> int:
    return -(-x // multiple) * multiple


def _mmad_cycles(m: int, n: int, k: int, fractal: tuple[int, int, int]) -> float:
    """MMAD cycles of one (m x k) @ (k x n) on fractal-padded tiles (one fractal per cycle)."""
    m0, k0, n0 = fractal
    return (_pad(m, m0) // m0) * (_pad(n, n0) // n0) * (_pad(k, k0) // k0)


def _vector_cycles(spec: DeviceSpec, scores: float, ops: float) -> float:
    """Cycles of ``ops`` fp32 vector instructions per score on one unit's vector cores."""
    v = spec.vector
    return math.ceil(scores * 4 / v.bytes_per_cycle) * ops / VECTOR_PER_UNIT / v.efficiency


def flash_tiling(
    spec: DeviceSpec, shape: FlashShape, *, backward: bool, io_bytes: int | None = None
) -> FlashTiling:
    """The units, per-unit cycles and memory traffic of one FlashAttentionScore(Grad);
    ``io_bytes`` replaces the HBM bytes of the inputs and outputs read or written once (the
    caller knows the tensors: masks, a bias, a dropout mask), re-reads and L2 traffic kept."""
    s = shape
    fractal = spec.cube_fractal(cube_dtype(spec, s.dtype))
    size = itemsize(s.dtype)
    stream_len = s.sq if backward else s.skv  # the axis a unit streams over
    own_len = s.skv if backward else s.sq  # the axis units are cut along
    own_block = BLOCK_KV if backward else BLOCK_Q
    stream_block = BLOCK_Q if backward else BLOCK_KV
    units_per_head = max(1, math.ceil(own_len / own_block))
    units = s.heads * units_per_head if min(s.sq, s.skv) else 0
    rows = min(own_block, _pad(own_len, fractal[0]))  # rows a unit owns (a whole block)
    blocks = max(1, math.ceil(math.ceil(stream_len / stream_block) * s.density))
    cols = min(stream_block, _pad(stream_len, fractal[2]))
    q_rows, kv_rows = (cols, rows) if backward else (rows, cols)
    if backward:  # S = Q K^T, dP = dO V^T, dV += P^T dO, dK += dS^T Q, dQ += dS K
        block_cube = (
            _mmad_cycles(q_rows, kv_rows, s.d, fractal)
            + _mmad_cycles(q_rows, kv_rows, s.dv, fractal)
            + _mmad_cycles(kv_rows, s.dv, q_rows, fractal)
            + _mmad_cycles(kv_rows, s.d, q_rows, fractal)
            + _mmad_cycles(q_rows, s.d, kv_rows, fractal)
        )
    else:  # S = Q K^T, O += P V
        block_cube = _mmad_cycles(q_rows, kv_rows, s.d, fractal) + _mmad_cycles(
            q_rows, s.dv, kv_rows, fractal
        )
    block_cube /= spec.cube.efficiency
    ops = SOFTMAX_GRAD_OPS if backward else SOFTMAX_OPS
    block_vector = _vector_cycles(spec, q_rows * kv_rows, ops)
    hbm, l2_cube, l2_vector = _traffic(spec, s, units, units_per_head, size, backward, io_bytes)
    block_dim = min(units, spec.cube.cores)
    return FlashTiling(
        units=units,
        units_per_head=units_per_head,
        block_dim=max(block_dim, 1),
        waves=math.ceil(units / spec.cube.cores) if units else 0,
        unit_cube_cycles=blocks * block_cube,
        unit_vector_cycles=blocks * block_vector,
        block_cube_cycles=block_cube,
        block_vector_cycles=block_vector,
        hbm_bytes=hbm,
        l2_cube_bytes=l2_cube,
        l2_vector_bytes=l2_vector,
    )


def _traffic(
    spec: DeviceSpec,
    s: FlashShape,
    units: int,
    per_head: int,
    size: int,
    backward: bool,
    io_bytes: int | None,
) -> tuple[int, int, int]:
    """(HBM bytes, L2 bytes through the cube cores' ports, L2 bytes through the vector cores'
    ports) of the kernel (see the module docstring)."""
    q = s.sq * s.d * size
    k = s.skv * s.d * size * s.kv_share
    v = s.skv * s.dv * size * s.kv_share
    o = s.sq * s.dv * size
    stats = s.sq * _STAT_BYTES_PER_ROW
    pairs = s.sq * s.skv * s.density  # score elements computed per head
    if backward:  # read q k v o dO stats, write dq dk dv; re-read q dO o (and stats) per unit
        once = q + k + v + 2 * o + stats + q + k + v
        reread = (q + 2 * o + stats) * s.density
        # the cube writes S and dP (fp32) and reads P and dS; the vector cores the reverse
        side = pairs * (4 + 4 + size + size)
        cube_side = side + per_head * s.sq * s.d * 4 * 2 * s.density  # dQ partials: r + w
        vector_side = side
    else:  # read q k v, write o and the softmax stats; re-read k v per unit
        once = q + k + v + o + stats
        reread = (k + v) * s.density
        cube_side = vector_side = pairs * (4 + size)  # S (fp32) one way, P the other
    in_flight_heads = math.ceil(min(units, spec.cube.cores) / per_head) if units else 0
    fits_l2 = in_flight_heads * reread <= spec.memory.l2_bytes
    rereads = (per_head - 1) * reread
    once_total = s.heads * once if io_bytes is None else io_bytes
    hbm = once_total + s.heads * (0 if fits_l2 else rereads)
    cube_l2 = s.heads * (cube_side + (rereads if fits_l2 else 0))
    return round(hbm), round(cube_l2), round(s.heads * vector_side)


def flash_kernel_cost(
    spec: DeviceSpec, shape: FlashShape, *, backward: bool, io_bytes: int | None = None
) -> KernelCost:
    """Cost of one ``FlashAttentionScore`` (``backward=False``) or ``FlashAttentionScoreGrad``
    kernel from its tile model (module docstring); ``io_bytes`` as in :func:`flash_tiling`."""
    t = flash_tiling(spec, shape, backward=backward, io_bytes=io_bytes)
    clock = spec.cube.clock_hz
    cube = t.waves * t.unit_cube_cycles / clock * 1e9
    vector = t.waves * t.unit_vector_cycles / clock * 1e9
    fill = t.waves * min(t.block_cube_cycles, t.block_vector_cycles) / clock * 1e9
    per_core = spec.memory.gm_bytes_per_cycle_per_core * clock
    hbm_bw = min(spec.memory.effective_bandwidth, t.block_dim * per_core)
    l2 = max(t.l2_cube_bytes, t.l2_vector_bytes) / spec.memory.l2_bandwidth
    memory = max(t.hbm_bytes / hbm_bw, l2) * 1e9
    sched = spec.dispatch.device_sched_ns
    work = max(cube, vector) + fill if t.units else 0.0
    matmuls = 5 if backward else 2
    s = shape
    flops = 2.0 * s.heads * s.sq * s.skv * s.density * (s.d + s.dv) / 2 * matmuls
    if max(work, memory) < sched:
        bound = Bound.OVERHEAD
    elif memory > work:
        bound = Bound.MEMORY
    else:
        bound = Bound.CUBE if cube >= vector else Bound.VECTOR
    return KernelCost(
        task_type=TaskType.MIX_AIC,
        block_dim=t.block_dim,
        duration_ns=sched + round(max(work, memory)),
        sched_ns=sched,
        cube_ns=cube,
        vector_ns=vector,
        memory_ns=memory,
        waves=t.waves,
        bound=bound,
        flops=flops,
        bytes=t.hbm_bytes,
    )


def flash_attention_cost(
    spec: DeviceSpec,
    *,
    batch: int,
    sq: int,
    skv: int,
    d: int,
    dv: int,
    dtype: str,
    nbytes: int,
    density: float = 1.0,
    backward: bool = False,
    kv_share: float = 1.0,
) -> KernelCost:
    """``FlashAttentionScore`` (``backward``: ``FlashAttentionScoreGrad``) over ``batch``
    (batch x heads) pairs of ``sq`` queries and ``skv`` keys of head dims ``d`` / ``dv`` in
    ``dtype``, whose inputs and outputs are ``nbytes`` of HBM traffic, computing ``density`` of
    the scores, with ``kv_share`` key/value heads per query head. Shared by the
    ``torch_npu.npu_fusion_attention`` shim (which launches the kernel) and the analysis (which
    re-costs an attention written as separate kernels), so an estimate and the kernel the
    recommended change launches are the same number."""
    shape = FlashShape(batch, sq, skv, d, dv, dtype, kv_share=kv_share, density=density)
    return flash_kernel_cost(spec, shape, backward=backward, io_bytes=nbytes)


def drop_mask_cost(spec: DeviceSpec, keep_prob: float, numels: int) -> KernelCost | None:
    """The ``DropOutGenMaskV3`` kernel generating the bit mask of ``numels`` scores (None
    without dropout); the mask's bytes are ``cost.bytes``."""
    if not 0.0 < keep_prob < 1.0:
        return None
    nbytes = -(-numels // 128) * 128 // 8 + 32
    return vector_cost(
        spec, elements=numels, dtype="uint8", bytes_moved=nbytes, ops_per_element=1 / 8
    )
