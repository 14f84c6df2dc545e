"""How long a task takes on the simulated device: roofline kernels, copies and TransData.

Kernel time = device scheduling overhead + max(cube time, vector time, memory time)
(the CANN tiling and roofline rules the presets' sources describe). Vector time is
``waves x (repeats / block_dim) / clock / efficiency`` with ``waves = ceil(block_dim / cores)``,
so a kernel with one block more than there are cores takes two waves. Cube time comes from a
tiling (:func:`gemm_tiling`): base tiles, split-K for narrow outputs, per-block pipe rates
(MMAD, MTE1, MTE2 from L2), a fixed per-block overhead, and waves. Memory time is bytes over
the lower of the achievable HBM bandwidth and what the launched cores can pull.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass

from msprof_py.device.dtypes import canonical, itemsize
from msprof_py.device.formats import transdata_bytes
from msprof_py.device.records import CopyKind, TaskType
from msprof_py.device.spec import DeviceSpec

#: A MatMul with a K axis longer than this, not 512 B-aligned ... (see :func:`matmul_cost`).
_MIX_K_THRESHOLD = 1000
_MIX_ALIGN_BYTES = 512
_MIX_MIN_MAC_NS = 50_000


class Bound(str, enum.Enum):
    """Which term of the roofline set a kernel's duration."""

    CUBE = "cube"
    VECTOR = "vector"
    MEMORY = "memory"
    OVERHEAD = "overhead"  # scheduling overhead exceeds every roofline term
    AICPU = "aicpu"


@dataclass(frozen=True, slots=True)
class KernelCost:
    """A costed kernel: which engine, how many blocks, and how long (ns)."""

    task_type: TaskType
    block_dim: int
    duration_ns: int
    sched_ns: int
    cube_ns: float
    vector_ns: float
    memory_ns: float
    waves: int
    bound: Bound
    flops: float
    bytes: int


def bound_of(sched: int, cube: float, vector: float, memory: float) -> Bound:
    """Which roofline term sets the duration (overhead when scheduling exceeds them all)."""
    work = max(cube, vector, memory)
    if work < sched:
        return Bound.OVERHEAD
    if work == cube:
        return Bound.CUBE
    return Bound.VECTOR if work == vector else Bound.MEMORY


def _memory_ns(spec: DeviceSpec, nbytes: int, block_dim: int) -> float:
    """Time to move ``nbytes`` between HBM and the ``block_dim`` cores that run the kernel."""
    if nbytes <= 0:
        return 0.0
    per_core = spec.memory.gm_bytes_per_cycle_per_core * spec.cube.clock_hz
    bandwidth = min(spec.memory.effective_bandwidth, block_dim * per_core)
    return nbytes / bandwidth * 1e9


def memory_ns(spec: DeviceSpec, nbytes: int, block_dim: int) -> float:
    """Time (ns) to move ``nbytes`` between HBM and the ``block_dim`` cores of one kernel: the
    bytes over the lower of the achievable HBM bandwidth and what those cores can pull (the
    memory term of every kernel's roofline; used by fused-kernel costing)."""
    return _memory_ns(spec, nbytes, block_dim)


def _unit_ns(total_cycles: float, block_dim: int, cores: int, clock_hz: float, eff: float) -> float:
    waves = math.ceil(block_dim / cores)
    return waves * (total_cycles / block_dim) / clock_hz / eff * 1e9


def cube_dtype(spec: DeviceSpec, dtype: str) -> str:
    """The dtype the cube actually computes ``dtype`` in.

    A cube without an fp32 fractal (910A, 310P) runs fp32 matmuls in fp16, as CANN's default
    precision mode ``allow_fp32_to_fp16`` does. Other unsupported dtypes raise.
    """
    name = canonical(dtype)
    if name not in spec.cube.fractal and name == "float32":
        return "float16"
    spec.cube_fractal(name)  # raises a clear error for dtypes the cube cannot run
    return name


@dataclass(frozen=True, slots=True)
class GemmTiling:
    """How a GEMM is cut into blocks: base tile, split-K factor, waves and per-block cycles."""

    tile_m: int
    tile_n: int
    tiles: int
    split_k: int
    k_chunk: int
    block_dim: int
    waves: int
    #: cycles of one K step (k0 of K) of one block: the slowest of MMAD, MTE1 and MTE2
    step_cycles: float
    #: cycles one block takes: K steps / efficiency + the fixed block overhead
    block_cycles: float


#: base-tile edges the tiling tries (multiples of the 16-wide fractal)
_TILE_EDGES = (16, 32, 64, 128, 256, 512, 1024)


def gemm_tiling(
    spec: DeviceSpec, m: int, n: int, k: int, *, batch: int = 1, dtype: str = "float16"
) -> GemmTiling:
    """Tile a (m x k) @ (k x n) GEMM (``batch`` of them) for the cube cores.

    Each block computes one ``tile_m x tile_n`` output tile. The tiling tries every tile
    whose fp32 accumulator fits L0C (the preset's ``base_tile_m x base_tile_n`` among them),
    shrunk to the fractal-padded output when that is smaller, and keeps the fastest, as CANN's
    MatMul tiling searches its candidates. When there are fewer tiles than cube cores and K is
    long, K is split across cores (split-K, slices of at least ``min_split_k``) and the partial
    sums are reduced. One K step of a block costs the slowest of its pipes, which double
    buffering overlaps: MMAD ``(tile_m/m0)(tile_n/n0)`` cycles, MTE1 loading the A and B
    slices into L0A/L0B, and MTE2 streaming them from L2 at one core's share of the L2
    bandwidth (less when a row is not 512 B-aligned). A block costs its K steps over the MMAD
    efficiency plus a fixed overhead (pipeline fill, FixPipe write-out); blocks run in
    ``ceil(blocks / cores)`` waves, so one tile more than a multiple of the cores costs a wave.
    """
    cube = spec.cube
    m0, _, n0 = spec.cube_fractal(cube_dtype(spec, dtype))
    mp, np_ = _ceil_to(max(m, 1), m0), _ceil_to(max(n, 1), n0)
    budget = spec.buffers.l0c_bytes
    shapes = {(min(cube.base_tile_m, mp), min(cube.base_tile_n, np_))}
    for tm in _TILE_EDGES:
        for tn in _TILE_EDGES:
            if tm * tn * 4 <= budget and tm % m0 == 0 and tn % n0 == 0:
                shapes.add((min(tm, mp), min(tn, np_)))
    best: GemmTiling | None = None
    for tm, tn in sorted(shapes):
        cand = _tiling(spec, m, n, k, batch, dtype, tm, tn)
        if best is None or cand.waves * cand.block_cycles < best.waves * best.block_cycles:
            best = cand
    assert best is not None
    return best


def _tiling(
    spec: DeviceSpec, m: int, n: int, k: int, batch: int, dtype: str, tile_m: int, tile_n: int
) -> GemmTiling:
    cube = spec.cube
    m0, k0, n0 = spec.cube_fractal(cube_dtype(spec, dtype))
    in_size = itemsize(dtype)
    tiles = batch * math.ceil(m / tile_m) * math.ceil(n / tile_n)
    kp = _ceil_to(k, k0)
    split = 1
    if 0 < tiles < cube.cores:
        split = max(1, min(cube.cores // tiles, kp // cube.min_split_k))
    k_chunk = _ceil_to(math.ceil(kp / split), k0)
    block_dim = max(1, tiles * split)
    mac = (tile_m // m0) * (tile_n // n0)
    slice_a = tile_m * k0 * in_size
    slice_b = tile_n * k0 * in_size
    mte1 = max(slice_a / cube.l0a_bytes_per_cycle, slice_b / cube.l0b_bytes_per_cycle)
    feed = spec.memory.l2_bandwidth / cube.cores / cube.clock_hz
    if (k * in_size) % _MIX_ALIGN_BYTES or (n * in_size) % _MIX_ALIGN_BYTES:
        feed *= cube.unaligned_feed_efficiency
    mte2 = (slice_a + slice_b) / feed
    step = max(mac, mte1, mte2)
    steps = k_chunk // k0 if tiles else 0
    block_cycles = steps * step / cube.efficiency + (cube.block_overhead_cycles if steps else 0)
    return GemmTiling(
        tile_m=tile_m,
        tile_n=tile_n,
        tiles=tiles,
        split_k=split,
        k_chunk=k_chunk,
        block_dim=block_dim,
        waves=math.ceil(block_dim / cube.cores),
        step_cycles=step,
        block_cycles=block_cycles,
    )


def matmul_cost(
    spec: DeviceSpec,
    m: int,
    n: int,
    k: int,
    *,
    batch: int = 1,
    dtype: str = "float16",
    out_dtype: str | None = None,
    block_dim: int | None = None,
    bytes_moved: int | None = None,
    vector_elements: int = 0,
) -> KernelCost:
    """Cost of ``batch`` matmuls of (m x k) @ (k x n) on the cube, tiled by :func:`gemm_tiling`.

    ``bytes_moved`` overrides the HBM traffic (default: both operands and the output, padded to
    the fractal); split-K adds its partial sums (fp32, written and read back once per slice).
    ``vector_elements`` adds fused vector work (an epilogue such as bias + ReLU). A long,
    unaligned K axis with more than 50 us of MAC time runs as a MIX_AIC task, as on A2.
    ``block_dim`` forces the number of blocks (waves follow from it; the tiling is kept).
    """
    if min(m, n, k, batch) < 0:
        raise ValueError(f"negative matmul dimension: m={m} n={n} k={k} batch={batch}")
    compute = cube_dtype(spec, dtype)
    m0, k0, n0 = spec.cube_fractal(compute)
    in_size = itemsize(dtype)
    out_size = itemsize(out_dtype or dtype)
    mp, kp, np_ = _ceil_to(m, m0), _ceil_to(k, k0), _ceil_to(n, n0)
    tiling = gemm_tiling(spec, m, n, k, batch=batch, dtype=dtype)
    cores = spec.cube.cores
    bd = tiling.block_dim if block_dim is None else block_dim
    waves = math.ceil(bd / cores)
    cube = 0.0
    if mp and np_ and kp and batch:
        if block_dim is None:
            cube = waves * tiling.block_cycles / spec.cube.clock_hz * 1e9
        else:  # forced blocks share the whole GEMM's blocks evenly
            per_block = tiling.block_cycles * tiling.block_dim / bd
            cube = waves * per_block / spec.cube.clock_hz * 1e9
    vector = 0.0
    if vector_elements:
        vector = _vector_ns(spec, vector_elements, out_dtype or dtype, 1.0, bd)
    if bytes_moved is None:
        bytes_moved = batch * ((mp * kp + kp * np_) * in_size + mp * np_ * out_size)
    if tiling.split_k > 1:
        bytes_moved += 2 * tiling.split_k * batch * mp * np_ * 4
    memory = _memory_ns(spec, bytes_moved, min(bd, cores))
    task_type = TaskType.AI_CORE
    k_unaligned = (k * in_size) % _MIX_ALIGN_BYTES != 0
    if k > _MIX_K_THRESHOLD and k_unaligned and cube > _MIX_MIN_MAC_NS:
        task_type = TaskType.MIX_AIC
    sched = spec.dispatch.device_sched_ns
    return KernelCost(
        task_type=task_type,
        # CANN's MatMul launches at most one block per cube core and loops over its tiles
        block_dim=min(bd, cores) if block_dim is None else bd,
        duration_ns=sched + round(max(cube, vector, memory)),
        sched_ns=sched,
        cube_ns=cube,
        vector_ns=vector,
        memory_ns=memory,
        waves=waves,
        bound=bound_of(sched, cube, vector, memory),
        flops=2.0 * batch * m * n * k,
        bytes=bytes_moved,
    )


def _vector_ns(spec: DeviceSpec, elements: int, dtype: str, ops: float, block_dim: int) -> float:
    repeats = math.ceil(elements * itemsize(dtype) / spec.vector.bytes_per_cycle) * ops
    v = spec.vector
    return _unit_ns(repeats, block_dim, v.cores, v.clock_hz, v.efficiency) if repeats else 0.0


def vector_cost(
    spec: DeviceSpec,
    *,
    elements: int,
    dtype: str,
    bytes_moved: int,
    ops_per_element: float = 1.0,
    block_dim: int | None = None,
    flops: float | None = None,
) -> KernelCost:
    """Cost of an elementwise or reduction kernel over ``elements`` elements on the vector units.

    ``bytes_moved`` is the HBM traffic (inputs read plus outputs written, padded as stored);
    ``ops_per_element`` the vector instructions per element (1 for add, more for exp or GELU).
    By default the kernel launches one block per ``min_bytes_per_core`` of traffic, up to the
    number of vector cores.
    """
    if elements < 0 or bytes_moved < 0:
        raise ValueError("elements and bytes_moved must be >= 0")
    cores = spec.vector.cores
    if block_dim is None:
        block_dim = min(cores, max(1, math.ceil(bytes_moved / spec.vector.min_bytes_per_core)))
    vector = _vector_ns(spec, elements, dtype, ops_per_element, block_dim)
    memory = _memory_ns(spec, bytes_moved, min(block_dim, cores))
    sched = spec.dispatch.device_sched_ns
    return KernelCost(
        task_type=TaskType.AI_VECTOR_CORE,
        block_dim=block_dim,
        duration_ns=sched + round(max(vector, memory)),
        sched_ns=sched,
        cube_ns=0.0,
        vector_ns=vector,
        memory_ns=memory,
        waves=math.ceil(block_dim / cores),
        bound=bound_of(sched, 0.0, vector, memory),
        flops=float(elements * ops_per_element) if flops is None else flops,
        bytes=bytes_moved,
    )


#: tensors per multi-tensor (foreach) kernel by (tensor lists the op reads, in place): the split
#: sizes of torch_npu's op-plugin (``_split_and_exec_npu_cmd_*``)
_FOREACH_CHUNK = {(1, True): 48, (1, False): 24, (2, True): 24, (2, False): 16}
_FOREACH_CHUNK_MORE_LISTS = {True: 16, False: 12}


def foreach_chunks(count: int, lists: int, inplace: bool) -> list[range]:
    """The list indices each kernel of a ``count``-tensor foreach op covers, in launch order
    (``lists``: the tensor lists it reads)."""
    size = _FOREACH_CHUNK.get((lists, inplace)) or _FOREACH_CHUNK_MORE_LISTS[inplace]
    return [range(start, min(count, start + size)) for start in range(0, count, size)]


def l2_read_ns(spec: DeviceSpec, nbytes: int, block_dim: int, cores: int) -> float:
    """Time (ns) for ``block_dim`` blocks on a pool of ``cores`` to read ``nbytes`` from L2:
    the L2 bandwidth shared evenly by the pool's cores, of which the kernel uses
    ``min(block_dim, cores)``."""
    if nbytes <= 0:
        return 0.0
    share = min(block_dim, cores) / cores
    return nbytes / (spec.memory.l2_bandwidth * share) * 1e9


def with_l2_reads(spec: DeviceSpec, cost: KernelCost, l2_bytes: int) -> KernelCost:
    """``cost`` of a vector kernel with ``l2_bytes`` of its reads served from L2 (a producer's
    output still resident, :class:`msprof_py.device.l2.L2Residency`).

    Memory time becomes the HBM time of the other bytes plus :func:`l2_read_ns` of those
    (the two streams through the same core ports, one after the other); duration = scheduling
    + max(vector, memory). Other kernel types (cube, MIX, AI CPU, whose memory terms follow
    their own rules) and ``l2_bytes <= 0`` return ``cost`` unchanged.
    """
    if l2_bytes <= 0 or cost.task_type is not TaskType.AI_VECTOR_CORE:
        return cost
    hit = min(l2_bytes, cost.bytes)
    cores = spec.vector.cores
    memory = _memory_ns(spec, cost.bytes - hit, min(cost.block_dim, cores))
    memory += l2_read_ns(spec, hit, cost.block_dim, cores)
    return dataclasses.replace(
        cost,
        duration_ns=cost.sched_ns + round(max(cost.cube_ns, cost.vector_ns, memory)),
        memory_ns=memory,
        bound=bound_of(cost.sched_ns, cost.cube_ns, cost.vector_ns, memory),
    )


def aicpu_cost(
    spec: DeviceSpec, *, elements: int, bytes_moved: int, flops: float | None = None
) -> KernelCost:
    """Cost of an op that falls back to one AI CPU core (int64/double variants, sort, nonzero).

    The work is the slower of the op's arithmetic (``flops``, default one per element) at the
    ARM core's FLOP rate and its traffic at the core's streaming rate, so an O(n^3) matmul
    costs its 2mnk FLOPs, not its element count.
    """
    cpu = spec.aicpu
    work_flops = float(elements) if flops is None else flops
    work = max(work_flops / cpu.flops_per_s, bytes_moved / cpu.bytes_per_s) * 1e9
    return KernelCost(
        task_type=TaskType.AI_CPU,
        block_dim=1,
        duration_ns=cpu.launch_overhead_ns + round(work),
        sched_ns=cpu.launch_overhead_ns,
        cube_ns=0.0,
        vector_ns=0.0,
        memory_ns=0.0,
        waves=1,
        bound=Bound.AICPU,
        flops=work_flops,
        bytes=bytes_moved,
    )


def transdata_cost(
    spec: DeviceSpec, shape: Sequence[int], dtype: str, src_format: str, dst_format: str
) -> KernelCost:
    """Cost of a TransData kernel re-laying a tensor: a memory-bound vector op over the padded
    bytes it reads (source layout) and writes (destination layout)."""
    nbytes = transdata_bytes(tuple(shape), dtype, src_format, dst_format)
    elements = math.prod(shape)
    return vector_cost(spec, elements=elements, dtype=dtype, bytes_moved=nbytes, flops=0.0)


def copy_ns(spec: DeviceSpec, kind: CopyKind, nbytes: int, *, pinned: bool = True) -> int:
    """Duration of one copy: latency + bytes / bandwidth of the link it crosses.

    Host<->device copies cross the host link (slower from pageable memory); device-to-device
    copies read and write HBM; host-to-host copies run on the host at pageable speed.
    """
    if nbytes < 0:
        raise ValueError("a copy cannot move a negative number of bytes")
    link = spec.host_link
    if kind is CopyKind.D2D:
        return spec.dispatch.device_sched_ns + round(
            2 * nbytes / spec.memory.effective_bandwidth * 1e9
        )
    if kind is CopyKind.H2H or not pinned:
        return link.pageable_latency_ns + round(nbytes / link.pageable_bandwidth * 1e9)
    return link.pinned_latency_ns + round(nbytes / link.pinned_bandwidth * 1e9)


def memset_ns(spec: DeviceSpec, nbytes: int) -> int:
    """Duration of a device memset of ``nbytes``: a write stream to HBM."""
    return spec.dispatch.device_sched_ns + round(nbytes / spec.memory.effective_bandwidth * 1e9)


def _ceil_to(x: int, multiple: int) -> int:
    return -(-x // multiple) * multiple
