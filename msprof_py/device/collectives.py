"""HCCL collective cost model: Hockney alpha-beta-gamma, as in HCCL's algorithm documentation.

Symbols: ``alpha`` = latency per step (s), ``beta`` = transfer time per byte (s/B), ``gamma`` =
reduction time per byte (s/B), ``p`` = ranks, ``n`` = bytes of the full buffer:

* all-reduce: the tensor's bytes;
* all-gather: the gathered OUTPUT (p x the per-rank input);
* reduce-scatter: the INPUT (p x the per-rank output);
* broadcast: the tensor's bytes.

Formulas (α = alpha, β = beta, γ = gamma):

* mesh:
  reduce-scatter α + (1/p)nβ + ((p−1)/p)nγ; all-gather α + (1/p)nβ;
  all-reduce 2α + (2/p)nβ + ((p−1)/p)nγ
* ring:
  reduce-scatter (p−1)α + ((p−1)/p)n(β+γ); all-gather (p−1)α + ((p−1)/p)nβ;
  all-reduce 2(p−1)α + 2((p−1)/p)nβ + ((p−1)/p)nγ
* hd (RHD) and nhr:
  reduce-scatter Lα + ((p−1)/p)n(β+γ); all-gather Lα + ((p−1)/p)nβ;
  all-reduce 2Lα + 2((p−1)/p)nβ + ((p−1)/p)nγ

with ``L = ⌈log2 p⌉``. ``hd`` (recursive halving-doubling, RHD) needs p to be a power of two;
``nhr`` takes any p. In mesh, β is per peer link and all p−1 links run concurrently.

Broadcast is not in HCCL's table; it is modelled as a scatter followed by an all-gather, and a
scatter costs what an all-gather does:

* mesh: 2α + (2/p)nβ
* ring: 2(p−1)α + 2((p−1)/p)nβ
* hd, nhr: 2⌈log2 p⌉α + 2((p−1)/p)nβ
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from msprof_py.device.spec import HcclSpec


class CollectiveOp(str, enum.Enum):
    """A collective operation."""

    ALL_REDUCE = "allreduce"
    ALL_GATHER = "allgather"
    REDUCE_SCATTER = "reducescatter"
    BROADCAST = "broadcast"

    def __str__(self) -> str:
        return self.value

    @property
    def label(self) -> str:
        """Human-readable name, e.g. ``"all-reduce"``."""
        return _LABELS[self]

    @classmethod
    def parse(cls, value: str | CollectiveOp) -> CollectiveOp:
        """Accept ``"allreduce"``, ``"all_reduce"``, ``"all-reduce"``, ``"AllReduce"`` ..."""
        if isinstance(value, CollectiveOp):
            return value
        if isinstance(value, str):
            key = value.strip().lower().replace("_", "").replace("-", "").replace(" ", "")
            for op in cls:
                if op.value == key:
                    return op
        valid = ", ".join(op.value for op in cls)
        raise ValueError(f"unknown collective {value!r}; valid: {valid}")


_LABELS = {
    CollectiveOp.ALL_REDUCE: "all-reduce",
    CollectiveOp.ALL_GATHER: "all-gather",
    CollectiveOp.REDUCE_SCATTER: "reduce-scatter",
    CollectiveOp.BROADCAST: "broadcast",
}


class Algorithm(str, enum.Enum):
    """A collective algorithm: full mesh, ring, recursive halving-doubling, or NHR."""

    MESH = "mesh"
    RING = "ring"
    HD = "hd"
    NHR = "nhr"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: str | Algorithm) -> Algorithm:
        """Accept the value in any case; ``"rhd"`` is an alias of ``"hd"``."""
        if isinstance(value, Algorithm):
            return value
        if isinstance(value, str):
            key = value.strip().lower()
            key = "hd" if key == "rhd" else key
            for alg in cls:
                if alg.value == key:
                    return alg
        valid = ", ".join(alg.value for alg in cls)
        raise ValueError(f"unknown collective algorithm {value!r}; valid: {valid}")


@dataclass(frozen=True)
class LinkParams:
    """Alpha-beta-gamma parameters of one kind of link."""

    alpha_s: float
    beta_s_per_byte: float
    gamma_s_per_byte: float
    #: peer links a rank drives at once (0: as many as the algorithm wants); a mesh over more
    #: peers than links sends its shares in ``ceil((p - 1) / links)`` rounds
    links: int = 0

    def __post_init__(self) -> None:
        if min(self.alpha_s, self.beta_s_per_byte, self.gamma_s_per_byte) < 0:
            raise ValueError(f"link parameters must be non-negative: {self}")


def link_params(hccl: HcclSpec, *, inter: bool) -> LinkParams:
    """Link parameters between servers (``inter=True``) or inside one server."""
    if inter:
        alpha_ns, bandwidth = hccl.inter_alpha_ns, hccl.inter_bandwidth
    else:
        alpha_ns, bandwidth = hccl.intra_alpha_ns, hccl.intra_link_bandwidth
    links = 0 if inter else hccl.intra_links
    return LinkParams(alpha_ns * 1e-9, 1.0 / bandwidth, 1.0 / hccl.reduce_bandwidth, links)


def group_link_params(hccl: HcclSpec) -> LinkParams:
    """Link parameters between the HCCS groups of one server (PCIe on the 910A)."""
    return LinkParams(
        hccl.group_alpha_ns * 1e-9, 1.0 / hccl.group_bandwidth, 1.0 / hccl.reduce_bandwidth
    )


def _grouped(hccl: HcclSpec, ranks: int) -> bool:
    """True when ``ranks`` ranks of one server span several HCCS groups (whole groups)."""
    m = hccl.mesh_size
    return bool(m) and ranks > m and ranks % m == 0


def server_phases(
    hccl: HcclSpec, op: CollectiveOp, n_bytes: float, ranks: int
) -> tuple[str, list[tuple[str, float]]]:
    """(algorithm name, [(phase, seconds)]) of ``op`` among ``ranks`` ranks of one server.

    One HCCS group: the intra-server algorithm, flat. Several groups (an 8-chip 910A is two
    4-chip meshes joined over PCIe): the same hierarchy as across servers, one level down -
    :func:`two_level` with the groups inside and PCIe between them (``m = mesh_size``; a ring
    between the groups).
    """
    alg = Algorithm.parse(hccl.intra_algorithm)
    link = link_params(hccl, inter=False)
    if not _grouped(hccl, ranks):
        seconds = collective_seconds(op, alg, ranks, n_bytes, link)
        return alg.value, [(f"intra {op.label} ({alg})", seconds)]
    m, groups, pcie = hccl.mesh_size, ranks // hccl.mesh_size, group_link_params(hccl)

    def group(phase_op: CollectiveOp) -> tuple[str, float]:
        seconds = collective_seconds(phase_op, alg, m, n_bytes, link)
        return f"intra-group {phase_op.label} ({alg})", seconds

    def across(phase_op: CollectiveOp, size: float) -> tuple[str, float]:
        seconds = collective_seconds(phase_op, Algorithm.RING, groups, size, pcie)
        return f"inter-group {phase_op.label} (ring, PCIe)", seconds

    return f"grouped({alg}+ring)", two_level(op, n_bytes, m, group, across)


Phase = tuple[str, float]


def two_level(
    op: CollectiveOp,
    n_bytes: float,
    inner_ranks: int,
    inner: Callable[[CollectiveOp], Phase],
    outer: Callable[[CollectiveOp, float], Phase],
) -> list[Phase]:
    """The phases of ``op`` over groups of ``inner_ranks`` ranks (``inner``: a phase inside
    every group on the whole ``n_bytes``; ``outer``: a phase between the groups on a size):
    all-reduce = inner reduce-scatter -> outer all-reduce(n/inner_ranks) -> inner all-gather,
    all-gather = outer all-gather(shard) -> inner all-gather, reduce-scatter = inner
    reduce-scatter -> outer reduce-scatter(shard), broadcast = outer -> inner broadcast."""
    shard = n_bytes / inner_ranks
    if op is CollectiveOp.ALL_REDUCE:
        return [
            inner(CollectiveOp.REDUCE_SCATTER),
            outer(CollectiveOp.ALL_REDUCE, shard),
            inner(CollectiveOp.ALL_GATHER),
        ]
    if op is CollectiveOp.ALL_GATHER:
        return [outer(CollectiveOp.ALL_GATHER, shard), inner(CollectiveOp.ALL_GATHER)]
    if op is CollectiveOp.REDUCE_SCATTER:
        return [inner(CollectiveOp.REDUCE_SCATTER), outer(CollectiveOp.REDUCE_SCATTER, shard)]
    return [outer(CollectiveOp.BROADCAST, n_bytes), inner(CollectiveOp.BROADCAST)]


def _steps(algorithm: Algorithm, p: int) -> int:
    """Latency steps of one reduce-scatter or all-gather phase."""
    if algorithm is Algorithm.MESH:
        return 1
    if algorithm is Algorithm.RING:
        return p - 1
    return (p - 1).bit_length()  # ⌈log2 p⌉ for hd and nhr


def collective_seconds(
    op: CollectiveOp | str,
    algorithm: Algorithm | str,
    p: int,
    n_bytes: float,
    link: LinkParams,
) -> float:
    """Seconds one flat collective takes under the alpha-beta-gamma model (module table)."""
    op = CollectiveOp.parse(op)
    algorithm = Algorithm.parse(algorithm)
    if p < 1:
        raise ValueError(f"collective needs at least one rank, got p={p}")
    if n_bytes < 0:
        raise ValueError(f"collective size must be non-negative, got {n_bytes} bytes")
    if algorithm is Algorithm.HD and p & (p - 1):
        raise ValueError(f"recursive halving-doubling needs a power-of-two rank count, got {p}")
    if p == 1:
        return 0.0
    alpha, beta, gamma = link.alpha_s, link.beta_s_per_byte, link.gamma_s_per_byte
    steps = _steps(algorithm, p)
    # bytes each rank sends in one reduce-scatter or all-gather phase (over its busiest link)
    share = n_bytes / p if algorithm is Algorithm.MESH else n_bytes * (p - 1) / p
    if algorithm is Algorithm.MESH and link.links:
        share *= -(-(p - 1) // link.links)  # rounds when there are fewer links than peers
    reduced = n_bytes * (p - 1) / p
    gather = steps * alpha + share * beta
    if op is CollectiveOp.ALL_GATHER:
        return gather
    if op is CollectiveOp.REDUCE_SCATTER:
        return gather + reduced * gamma
    if op is CollectiveOp.ALL_REDUCE:
        return 2 * gather + reduced * gamma
    return 2 * gather  # broadcast = scatter + all-gather


@dataclass(frozen=True)
class CollectiveCost:
    """The modelled duration of one collective, split into its phases."""

    op: CollectiveOp
    #: e.g. ``"mesh"`` or ``"hierarchical(mesh+hd)"``.
    algorithm: str
    world_size: int
    n_bytes: int
    duration_ns: int
    #: (phase name, ns) in execution order; the ns sum to ``duration_ns``.
    phases: tuple[tuple[str, int], ...]

    @property
    def bus_bandwidth(self) -> float:
        """Bus bandwidth in bytes/s as nccl-tests define it (0 for a zero duration)."""
        if self.duration_ns <= 0:
            return 0.0
        p = self.world_size
        factor = {
            CollectiveOp.ALL_REDUCE: 2 * (p - 1) / p,
            CollectiveOp.ALL_GATHER: (p - 1) / p,
            CollectiveOp.REDUCE_SCATTER: (p - 1) / p,
            CollectiveOp.BROADCAST: 1.0,
        }[self.op]
        return self.n_bytes * factor / (self.duration_ns * 1e-9)


def collective_cost(
    hccl: HcclSpec,
    op: CollectiveOp | str,
    n_bytes: int,
    world_size: int,
    algorithm: str | Algorithm | None = None,
) -> CollectiveCost:
    """Cost of ``op`` over ``world_size`` ranks on the links ``hccl`` describes.

    ``algorithm`` None or ``"auto"`` picks as HCCL does on A2: inside one server
    (``world_size <= ranks_per_server``) the intra-server algorithm; across servers, when every
    server is full, a hierarchy of intra- and inter-server phases:

    * all-reduce: intra reduce-scatter(n) -> inter all-reduce(n/local) -> intra all-gather(n)
    * all-gather: inter all-gather(n/local) -> intra all-gather(n)
    * reduce-scatter: intra reduce-scatter(n) -> inter reduce-scatter(n/local)
    * broadcast: inter broadcast(n) -> intra broadcast(n)

    (``local = ranks_per_server``; ``hd`` between servers falls back to ``nhr`` when the server
    count is not a power of two). Otherwise a flat inter-server ring. An explicit algorithm
    runs flat, on intra-server links if the ranks fit in one server, else on inter-server links.
    """
    op = CollectiveOp.parse(op)
    if isinstance(n_bytes, bool) or n_bytes < 0:
        raise ValueError(f"collective size must be a non-negative byte count, got {n_bytes!r}")
    if isinstance(world_size, bool) or world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size!r}")
    local = hccl.ranks_per_server
    forced = None
    if algorithm is not None and str(algorithm).strip().lower() != "auto":
        forced = Algorithm.parse(algorithm)

    # (phase name, seconds) in order
    steps: list[tuple[str, float]]
    if forced is None and world_size <= local:
        name, steps = server_phases(hccl, op, n_bytes, world_size)
    elif forced is not None or world_size % local:
        inter = world_size > local
        if forced is not None:
            alg = forced
        else:
            alg = Algorithm.RING if inter else Algorithm.parse(hccl.intra_algorithm)
        link = link_params(hccl, inter=inter)
        where = "inter" if inter else "intra"
        name = alg.value
        steps = [
            (f"{where} {op.label} ({alg})", collective_seconds(op, alg, world_size, n_bytes, link))
        ]
    else:
        servers = world_size // local
        inter_alg = Algorithm.parse(hccl.inter_algorithm)
        if inter_alg is Algorithm.HD and servers & (servers - 1):
            inter_alg = Algorithm.NHR
        intra_name = server_phases(hccl, CollectiveOp.ALL_REDUCE, 0, local)[0]
        name = f"hierarchical({intra_name}+{inter_alg})"
        inter_link = link_params(hccl, inter=True)

        def intra(phase_op: CollectiveOp) -> tuple[str, float]:
            _, parts = server_phases(hccl, phase_op, n_bytes, local)
            if len(parts) == 1:
                return parts[0]
            label = " -> ".join(part for part, _ in parts)
            return f"intra {phase_op.label} [{label}]", sum(sec for _, sec in parts)

        def across(phase_op: CollectiveOp, size: float) -> tuple[str, float]:
            seconds = collective_seconds(phase_op, inter_alg, servers, size, inter_link)
            return f"inter {phase_op.label} ({inter_alg})", seconds

        steps = two_level(op, n_bytes, local, intra, across)

    # Round cumulative time so the phases add up exactly to round(total seconds * 1e9).
    phases: list[tuple[str, int]] = []
    elapsed_s, elapsed_ns = 0.0, 0
    for phase_name, seconds in steps:
        elapsed_s += seconds
        end_ns = round(elapsed_s * 1e9)
        phases.append((phase_name, end_ns - elapsed_ns))
        elapsed_ns = end_ns
    return CollectiveCost(
        op=op,
        algorithm=name,
        world_size=world_size,
        n_bytes=n_bytes,
        duration_ns=elapsed_ns,
        phases=tuple(phases),
    )
