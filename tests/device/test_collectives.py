"""Tests for msprof_py.device.collectives: the HCCL alpha-beta-gamma cost model."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import pytest

from msprof_py.device.collectives import (
    Algorithm,
    CollectiveCost,
    CollectiveOp,
    LinkParams,
    collective_cost,
    collective_seconds,
    link_params,
)
from msprof_py.device.spec import DeviceSpec, HcclSpec, SpecError

# alpha = 10 us, beta = 1 / (10 GB/s), gamma = 1 / (100 GB/s)
A, B, G = 10e-6, 1 / 10e9, 1 / 100e9
LINK = LinkParams(alpha_s=A, beta_s_per_byte=B, gamma_s_per_byte=G)
GB = 1e9

AR, AG, RS, BC = (
    CollectiveOp.ALL_REDUCE,
    CollectiveOp.ALL_GATHER,
    CollectiveOp.REDUCE_SCATTER,
    CollectiveOp.BROADCAST,
)


@pytest.fixture(scope="module")
def hccl() -> HcclSpec:
    return DeviceSpec.load("ascend910b").hccl


# ---- parsing --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "op"),
    [
        ("allreduce", AR),
        ("all_reduce", AR),
        ("allReduce", AR),
        ("AllReduce", AR),
        ("all-reduce", AR),
        ("ALL_GATHER", AG),
        ("reduce_scatter", RS),
        ("ReduceScatter", RS),
        ("Broadcast", BC),
        (AR, AR),
    ],
)
def test_op_parse(text: str, op: CollectiveOp) -> None:
    assert CollectiveOp.parse(text) is op


def test_op_parse_rejects_unknown() -> None:
    with pytest.raises(ValueError, match="allreduce, allgather, reducescatter, broadcast"):
        CollectiveOp.parse("alltoall")


def test_algorithm_parse() -> None:
    assert Algorithm.parse("MESH") is Algorithm.MESH
    assert Algorithm.parse("rhd") is Algorithm.HD
    assert Algorithm.parse(Algorithm.NHR) is Algorithm.NHR
    with pytest.raises(ValueError, match="mesh, ring, hd, nhr"):
        Algorithm.parse("star")


def test_link_params_reject_negative_values() -> None:
    with pytest.raises(ValueError):
        LinkParams(-1.0, B, G)


# ---- flat formulas --------------------------------------------------------------------------


def test_hand_computed_mesh_all_reduce() -> None:
    # 2 alpha + (2/p) n beta + ((p-1)/p) n gamma, p = 8, n = 1 GB
    expected = 2 * 10e-6 + (2 / 8) * 1e9 / 10e9 + (7 / 8) * 1e9 / 100e9
    assert expected == pytest.approx(0.03377)
    assert collective_seconds("allreduce", "mesh", 8, GB, LINK) == pytest.approx(expected)


def test_hand_computed_ring_all_reduce() -> None:
    # 2(p-1) alpha + 2((p-1)/p) n beta + ((p-1)/p) n gamma
    expected = 2 * 7 * 10e-6 + 2 * (7 / 8) * 1e9 / 10e9 + (7 / 8) * 1e9 / 100e9
    assert expected == pytest.approx(0.18389)
    assert collective_seconds(AR, Algorithm.RING, 8, GB, LINK) == pytest.approx(expected)


def test_hand_computed_hd_reduce_scatter() -> None:
    # log2(8) alpha + ((p-1)/p) n (beta + gamma)
    expected = 3 * 10e-6 + (7 / 8) * 1e9 * (1 / 10e9 + 1 / 100e9)
    assert expected == pytest.approx(0.09628)
    assert collective_seconds(RS, "hd", 8, GB, LINK) == pytest.approx(expected)


def _log(p: int) -> int:
    return math.ceil(math.log2(p))


# The reference table, written out independently of the implementation.
FORMULAS: dict[tuple[CollectiveOp, Algorithm], Callable[[int, float], float]] = {
    (RS, Algorithm.MESH): lambda p, n: A + n / p * B + (p - 1) / p * n * G,
    (AG, Algorithm.MESH): lambda p, n: A + n / p * B,
    (AR, Algorithm.MESH): lambda p, n: 2 * A + 2 / p * n * B + (p - 1) / p * n * G,
    (BC, Algorithm.MESH): lambda p, n: 2 * A + 2 / p * n * B,
    (RS, Algorithm.RING): lambda p, n: (p - 1) * A + (p - 1) / p * n * (B + G),
    (AG, Algorithm.RING): lambda p, n: (p - 1) * A + (p - 1) / p * n * B,
    (AR, Algorithm.RING): lambda p, n: (
        2 * (p - 1) * A + 2 * (p - 1) / p * n * B + (p - 1) / p * n * G
    ),
    (BC, Algorithm.RING): lambda p, n: 2 * (p - 1) * A + 2 * (p - 1) / p * n * B,
}
for _alg in (Algorithm.HD, Algorithm.NHR):
    FORMULAS[(RS, _alg)] = lambda p, n: _log(p) * A + (p - 1) / p * n * (B + G)
    FORMULAS[(AG, _alg)] = lambda p, n: _log(p) * A + (p - 1) / p * n * B
    FORMULAS[(AR, _alg)] = lambda p, n: (
        2 * _log(p) * A + 2 * (p - 1) / p * n * B + (p - 1) / p * n * G
    )
    FORMULAS[(BC, _alg)] = lambda p, n: 2 * _log(p) * A + 2 * (p - 1) / p * n * B


@pytest.mark.parametrize(("op", "alg"), sorted(FORMULAS, key=str))
@pytest.mark.parametrize("n", [0, 1000, 123_456_789])
def test_every_op_and_algorithm_matches_its_formula(
    op: CollectiveOp, alg: Algorithm, n: int
) -> None:
    sizes = [2, 4, 8, 16] if alg is Algorithm.HD else [2, 3, 6, 8, 13]
    for p in sizes:
        got = collective_seconds(op, alg, p, n, LINK)
        assert got == pytest.approx(FORMULAS[(op, alg)](p, n), rel=1e-12), (op, alg, p, n)


def test_nhr_uses_ceil_log2() -> None:
    # p = 6: ceil(log2 6) = 3 steps per phase
    expected = 3 * A + (5 / 6) * GB * B
    assert collective_seconds(AG, "nhr", 6, GB, LINK) == pytest.approx(expected)


@pytest.mark.parametrize("op", list(CollectiveOp))
@pytest.mark.parametrize("alg", list(Algorithm))
def test_single_rank_costs_nothing(op: CollectiveOp, alg: Algorithm) -> None:
    assert collective_seconds(op, alg, 1, GB, LINK) == 0.0


def test_rhd_needs_a_power_of_two() -> None:
    with pytest.raises(ValueError, match="power-of-two"):
        collective_seconds(AR, "hd", 6, GB, LINK)
    assert collective_seconds(AR, "nhr", 6, GB, LINK) > 0


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError):
        collective_seconds(AR, "ring", 0, GB, LINK)
    with pytest.raises(ValueError):
        collective_seconds(AR, "ring", 8, -1, LINK)


def test_ring_all_reduce_approaches_bandwidth_term() -> None:
    p = 8
    no_gamma = LinkParams(A, B, 0.0)
    ratios = []
    for n in (1e6, 1e9, 1e12):
        bandwidth_term = 2 * (p - 1) / p * n * B
        ratios.append(collective_seconds(AR, "ring", p, n, no_gamma) / bandwidth_term)
    assert ratios[0] > ratios[1] > ratios[2] > 1
    assert ratios[2] == pytest.approx(1, rel=1e-5)


# ---- link parameters and collective_cost ----------------------------------------------------


def test_link_params_from_preset(hccl: HcclSpec) -> None:
    intra = link_params(hccl, inter=False)
    inter = link_params(hccl, inter=True)
    assert intra.alpha_s == pytest.approx(hccl.intra_alpha_ns * 1e-9)
    assert intra.beta_s_per_byte == pytest.approx(1 / hccl.intra_link_bandwidth)
    assert inter.alpha_s == pytest.approx(hccl.inter_alpha_ns * 1e-9)
    assert inter.beta_s_per_byte == pytest.approx(1 / hccl.inter_bandwidth)
    assert intra.gamma_s_per_byte == inter.gamma_s_per_byte == 1 / hccl.reduce_bandwidth
    # the 910B preset: 8 us / 28 GB/s inside a server, 15 us / 25 GB/s between servers
    assert intra.alpha_s == pytest.approx(8e-6)
    assert intra.beta_s_per_byte == pytest.approx(1 / 28e9)
    assert inter.alpha_s == pytest.approx(15e-6)
    assert inter.beta_s_per_byte == pytest.approx(1 / 25e9)


def test_flat_auto_inside_one_server(hccl: HcclSpec) -> None:
    n = 64 * 2**20
    cost = collective_cost(hccl, "all_reduce", n, 8)
    seconds = collective_seconds(AR, hccl.intra_algorithm, 8, n, link_params(hccl, inter=False))
    assert cost.op is AR
    assert cost.algorithm == "mesh"
    assert cost.world_size == 8 and cost.n_bytes == n
    assert cost.duration_ns == round(seconds * 1e9)
    assert cost.phases == (("intra all-reduce (mesh)", cost.duration_ns),)
    assert collective_cost(hccl, AR, n, 8, "auto") == cost
    assert collective_cost(hccl, AR, n, 8, "AUTO") == cost


def test_intra_ring_preset(hccl: HcclSpec) -> None:
    ring_hccl = dataclasses.replace(hccl, intra_algorithm="ring")
    cost = collective_cost(ring_hccl, AG, 10**8, 4)
    seconds = collective_seconds(AG, "ring", 4, 10**8, link_params(hccl, inter=False))
    assert cost.algorithm == "ring"
    assert cost.duration_ns == round(seconds * 1e9)


def test_single_rank_collective_cost(hccl: HcclSpec) -> None:
    cost = collective_cost(hccl, AR, 10**9, 1)
    assert cost.duration_ns == 0
    assert cost.bus_bandwidth == 0.0


def test_mesh_beats_ring_on_910b(hccl: HcclSpec) -> None:
    for n in (1024, 2**20, 2**30):
        mesh = collective_cost(hccl, AR, n, 8, "mesh")
        ring = collective_cost(hccl, AR, n, 8, "ring")
        assert mesh.duration_ns < ring.duration_ns


def test_hierarchical_all_reduce_on_910b(hccl: HcclSpec) -> None:
    n = 2**30
    cost = collective_cost(hccl, "allreduce", n, 16)
    assert cost.algorithm == "hierarchical(mesh+hd)"
    names = [name for name, _ in cost.phases]
    assert names == [
        "intra reduce-scatter (mesh)",
        "inter all-reduce (hd)",
        "intra all-gather (mesh)",
    ]
    assert sum(ns for _, ns in cost.phases) == cost.duration_ns

    intra, inter = link_params(hccl, inter=False), link_params(hccl, inter=True)
    flat = [
        collective_seconds(RS, "mesh", 8, n, intra),
        collective_seconds(AR, "hd", 2, n / 8, inter),
        collective_seconds(AG, "mesh", 8, n, intra),
    ]
    for (_, ns), seconds in zip(cost.phases, flat, strict=True):
        assert abs(ns - seconds * 1e9) <= 1  # rounding only
    assert cost.duration_ns == round(sum(flat) * 1e9)
    # the hierarchy beats a flat ring over the inter-server links
    assert cost.duration_ns < collective_cost(hccl, AR, n, 16, "ring").duration_ns


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        (
            AG,
            [
                ("inter all-gather (hd)", AG, "inter", 2**27),
                ("intra all-gather (mesh)", AG, "intra", 2**30),
            ],
        ),
        (
            RS,
            [
                ("intra reduce-scatter (mesh)", RS, "intra", 2**30),
                ("inter reduce-scatter (hd)", RS, "inter", 2**27),
            ],
        ),
        (
            BC,
            [
                ("inter broadcast (hd)", BC, "inter", 2**30),
                ("intra broadcast (mesh)", BC, "intra", 2**30),
            ],
        ),
    ],
)
def test_hierarchical_other_ops(
    hccl: HcclSpec, op: CollectiveOp, expected: list[tuple[str, CollectiveOp, str, int]]
) -> None:
    cost = collective_cost(hccl, op, 2**30, 16)
    assert [name for name, _ in cost.phases] == [e[0] for e in expected]
    for (_, ns), (_, phase_op, where, size) in zip(cost.phases, expected, strict=True):
        p = 8 if where == "intra" else 2
        alg = "mesh" if where == "intra" else "hd"
        seconds = collective_seconds(
            phase_op, alg, p, size, link_params(hccl, inter=where == "inter")
        )
        assert abs(ns - seconds * 1e9) <= 1
    assert sum(ns for _, ns in cost.phases) == cost.duration_ns


def test_hierarchical_falls_back_to_nhr(hccl: HcclSpec) -> None:
    cost = collective_cost(hccl, AR, 2**30, 24)  # 3 servers: not a power of two
    assert cost.algorithm == "hierarchical(mesh+nhr)"
    assert cost.phases[1][0] == "inter all-reduce (nhr)"
    seconds = collective_seconds(AR, "nhr", 3, 2**30 / 8, link_params(hccl, inter=True))
    assert abs(cost.phases[1][1] - seconds * 1e9) <= 1


def test_partial_servers_use_flat_inter_ring(hccl: HcclSpec) -> None:
    cost = collective_cost(hccl, AR, 2**30, 12)
    seconds = collective_seconds(AR, "ring", 12, 2**30, link_params(hccl, inter=True))
    assert cost.algorithm == "ring"
    assert cost.phases == (("inter all-reduce (ring)", round(seconds * 1e9)),)


def test_explicit_algorithm_is_flat(hccl: HcclSpec) -> None:
    n = 2**28
    inside = collective_cost(hccl, AR, n, 8, "ring")
    intra_s = collective_seconds(AR, "ring", 8, n, link_params(hccl, inter=False))
    assert inside.algorithm == "ring"
    assert inside.phases == (("intra all-reduce (ring)", round(intra_s * 1e9)),)

    across = collective_cost(hccl, AR, n, 16, Algorithm.HD)
    inter_s = collective_seconds(AR, "hd", 16, n, link_params(hccl, inter=True))
    assert across.algorithm == "hd"
    assert across.duration_ns == round(inter_s * 1e9)
    with pytest.raises(ValueError, match="power-of-two"):
        collective_cost(hccl, AR, n, 6, "hd")


def test_collective_cost_rejects_bad_arguments(hccl: HcclSpec) -> None:
    with pytest.raises(ValueError):
        collective_cost(hccl, AR, -1, 8)
    with pytest.raises(ValueError):
        collective_cost(hccl, AR, 1024, 0)
    with pytest.raises(ValueError):
        collective_cost(hccl, "alltoall", 1024, 8)
    with pytest.raises(ValueError):
        collective_cost(hccl, AR, 1024, 8, "star")


# ---- bus bandwidth --------------------------------------------------------------------------


def test_bus_bandwidth_definitions() -> None:
    def cost(op: CollectiveOp) -> CollectiveCost:
        return CollectiveCost(op, "ring", 8, 8 * 10**9, 10**9, (("x", 10**9),))

    # t = 1 s, n = 8 GB, p = 8
    assert cost(AR).bus_bandwidth == pytest.approx(8e9 * 2 * 7 / 8)
    assert cost(AG).bus_bandwidth == pytest.approx(8e9 * 7 / 8)
    assert cost(RS).bus_bandwidth == pytest.approx(8e9 * 7 / 8)
    assert cost(BC).bus_bandwidth == pytest.approx(8e9)
    assert CollectiveCost(AR, "ring", 8, 10, 0, ()).bus_bandwidth == 0.0


def test_large_mesh_all_reduce_bus_bandwidth_below_links(hccl: HcclSpec) -> None:
    cost = collective_cost(hccl, AR, 2**32, 8)
    peak = hccl.intra_links * hccl.intra_link_bandwidth
    assert 0.5 * peak < cost.bus_bandwidth < peak


def test_a_mesh_with_fewer_links_than_peers_sends_in_rounds(hccl: HcclSpec) -> None:
    import dataclasses

    n = 64 * 2**20
    full = collective_cost(hccl, AR, n, 8)  # 7 links for 7 peers: one round
    three = collective_cost(dataclasses.replace(hccl, intra_links=3), AR, n, 8)
    # all-reduce = 2 (alpha + rounds x n/p x beta) + (p-1)/p n gamma, rounds = ceil(7/3) = 3
    beta, gamma = 1 / hccl.intra_link_bandwidth, 1 / hccl.reduce_bandwidth
    alpha = hccl.intra_alpha_ns * 1e-9
    assert full.duration_ns == round((2 * (alpha + n / 8 * beta) + 7 / 8 * n * gamma) * 1e9)
    assert three.duration_ns == round((2 * (alpha + 3 * n / 8 * beta) + 7 / 8 * n * gamma) * 1e9)


# ---- HCCS groups inside a server (910A: two 4-chip meshes joined over PCIe) -------------------


def test_910a_server_is_two_meshes_joined_over_pcie() -> None:
    """8 ranks of one 910A server, 100 MiB all-reduce, by hand: alpha 8 us and 30 GB/s per
    HCCS link (3 links: a full mesh of 4 in one round), PCIe 10 us and 25 GB/s between the
    groups, gamma = 1 / 320 GB/s."""
    hccl = DeviceSpec.load("ascend910a").hccl
    assert (hccl.mesh_size, hccl.intra_links, hccl.intra_algorithm) == (4, 3, "mesh")
    n = 100 * 2**20
    group_rs = 8e-6 + n / 4 / (30 * GB) + n * 3 / 4 / (320 * GB)
    pcie_ar = 2 * (10e-6 + (n / 4) * (1 / 2) / (25 * GB)) + (n / 4) / 2 / (320 * GB)
    group_ag = 8e-6 + n / 4 / (30 * GB)
    cost = collective_cost(hccl, "allreduce", n, 8)
    assert cost.algorithm == "grouped(mesh+ring)"
    assert [name for name, _ in cost.phases] == [
        "intra-group reduce-scatter (mesh)",
        "inter-group all-reduce (ring, PCIe)",
        "intra-group all-gather (mesh)",
    ]
    assert cost.duration_ns == round((group_rs + pcie_ar + group_ag) * 1e9)
    # four ranks stay inside one group: one flat mesh, no PCIe
    four = collective_cost(hccl, "allreduce", n, 4)
    assert four.algorithm == "mesh" and four.duration_ns == round(
        (2 * (8e-6 + n / 4 / (30 * GB)) + n * 3 / 4 / (320 * GB)) * 1e9
    )


def test_910a_across_servers_nests_the_groups() -> None:
    hccl = DeviceSpec.load("ascend910a").hccl
    cost = collective_cost(hccl, "allreduce", 64 * 2**20, 16)
    assert cost.algorithm == "hierarchical(grouped(mesh+ring)+hd)"
    assert len(cost.phases) == 3 and "PCIe" in cost.phases[0][0]
    assert sum(ns for _, ns in cost.phases) == cost.duration_ns


def test_a_spec_without_group_fields_keeps_one_group_per_server() -> None:
    """Profiles recorded before the group fields carry specs without them: they load, and
    their collectives cost what they did."""
    raw = DeviceSpec.load("ascend910a").raw
    old = dataclasses.replace(DeviceSpec.load("ascend910a").hccl, mesh_size=0)
    trimmed = {k: dict(v) if isinstance(v, dict) else v for k, v in raw.items()}
    for key in ("mesh_size", "group_alpha_us", "group_bandwidth_gb_s"):
        del trimmed["hccl"][key]
    spec = DeviceSpec.from_mapping(trimmed)
    assert spec.hccl.mesh_size == 0
    assert collective_cost(spec.hccl, "allreduce", 2**20, 8) == collective_cost(
        old, "allreduce", 2**20, 8
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"mesh_size": 3}, "mesh_size"),
        ({"mesh_size": 8}, "mesh_size"),
    ],
)
def test_group_fields_are_checked(fields: dict[str, int], message: str) -> None:
    raw = DeviceSpec.load("ascend910a").raw
    changed = {k: dict(v) if isinstance(v, dict) else v for k, v in raw.items()}
    changed["hccl"].update(fields)
    with pytest.raises(SpecError, match=message):
        DeviceSpec.from_mapping(changed)
