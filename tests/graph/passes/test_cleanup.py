"""Cleanup passes: CSE, constant folding, dead-code elimination (also with fuse=False)."""

from __future__ import annotations

from graph_builder import Builder

from msprof_py.device.spec import DeviceSpec
from msprof_py.graph.ir import ValueRef
from msprof_py.graph.passes import run_passes

SPEC = DeviceSpec.load("ascend910b")
S = (64, 128)


def _names(result) -> list[str]:
    return [k.name for k in result.kernels]


def test_cse_merges_duplicates_and_readers_read_the_first() -> None:
    b = Builder(SPEC)
    x = b.input("x", S)
    m = b.op("mean", "mean", [x], (64, 1), attrs={"dim": [-1], "keepdim": True})
    s1 = b.op("sub", "sub", [x, m], S)
    s2 = b.op("sub_1", "sub", [x, m], S)
    out = b.op("mul", "mul", [s1, s2], S)
    result = run_passes(b.graph(out), SPEC, fuse=False)
    assert _names(result) == ["mean", "sub", "mul"]
    assert result.removed == {"sub_1": "cse: same as sub"}
    assert result.aliases == {ValueRef("sub_1"): ValueRef("sub")}
    mul = result.kernels[-1]
    assert mul.inputs == (ValueRef("sub"),)  # both operands now the same value
    assert [(r.pass_name, r.nodes, r.hit) for r in result.records] == [
        ("CSEPass", ("sub", "sub_1"), True)
    ]


def test_cse_keeps_different_attrs_and_random_ops() -> None:
    b = Builder(SPEC)
    x = b.input("x", S)
    a = b.op("a", "mul", [x], S, attrs={"other": 2.0})
    c = b.op("c", "mul", [x], S, attrs={"other": 3.0})
    d1 = b.op("d1", "native_dropout", [x], outputs=[S, S], attrs={"p": 0.1})
    d2 = b.op("d2", "native_dropout", [x], outputs=[S, S], attrs={"p": 0.1})
    result = run_passes(b.graph(a, c, d1, d2), SPEC, fuse=False)
    assert _names(result) == ["a", "c", "d1", "d2"]
    assert not result.records


def test_constant_folding_is_transitive_and_views_of_consts_are_const() -> None:
    b = Builder(SPEC)
    w = b.const("w", (128, 128))
    wt = b.op("t", "t", [w], (128, 128))
    scaled = b.op("scale", "mul", [wt], (128, 128), attrs={"other": 0.5})
    cast = b.op("cast", "_to_copy", [scaled], (128, 128))
    x = b.input("x", S)
    y = b.op("mm", "mm", [x, cast], S)
    result = run_passes(b.graph(y), SPEC, fuse=False)
    assert _names(result) == ["mm"]
    assert result.folded == {"scale", "cast"}
    assert result.kernels[0].inputs == (ValueRef("x"), ValueRef("cast"))
    assert [r.nodes for r in result.records if r.pass_name == "ConstantFoldingPass"] == [
        ("scale",),
        ("cast",),
    ]


def test_param_inputs_are_not_folded() -> None:
    b = Builder(SPEC)
    w = b.param("w", S)
    y = b.op("neg", "neg", [w], S)
    assert _names(run_passes(b.graph(y), SPEC, fuse=False)) == ["neg"]


def test_dce_removes_unread_ops_but_keeps_in_place_ones() -> None:
    b = Builder(SPEC)
    x = b.input("x", S)
    buf = b.param("buf", S)
    dead = b.op("dead", "exp", [x], S)
    b.op("dead2", "neg", [dead], S)
    upd = b.op("upd", "mul", [x], S, attrs={"other": 0.9})
    b.op("copy_", "copy_", [buf, upd], S)
    y = b.op("y", "relu", [x], S)
    result = run_passes(b.graph(y), SPEC, fuse=False)
    assert _names(result) == ["upd", "copy_", "y"]
    assert result.removed == {"dead": "dead", "dead2": "dead"}
    assert {r.nodes for r in result.records if r.pass_name == "DeadCodeEliminationPass"} == {
        ("dead",),
        ("dead2",),
    }


def test_kernels_read_the_base_of_a_view() -> None:
    b = Builder(SPEC)
    x = b.input("x", S)
    r = b.op("relu", "relu", [x], S)
    v = b.op("view", "view", [r], (128, 64))
    y = b.op("exp", "exp", [v], (128, 64))
    result = run_passes(b.graph(y), SPEC, fuse=False)
    assert result.kernels[1].inputs == (ValueRef("relu"),)


def test_no_fusion_without_fuse() -> None:
    b = Builder(SPEC)
    x = b.input("x", S)
    y = b.op("b", "exp", [b.op("a", "relu", [x], S)], S)
    result = run_passes(b.graph(y), SPEC, fuse=False)
    assert _names(result) == ["a", "b"] and all(k.pass_name == "" for k in result.kernels)
    fused = run_passes(b.graph(y), SPEC)
    assert [k.pass_name for k in fused.kernels] == ["AutoFuse"]
