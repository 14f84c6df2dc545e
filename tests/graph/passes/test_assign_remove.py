"""AssignRemovePass: a training BN's running-stat copies and the ``num_batches_tracked`` copy
launch nothing; the BN / Add kernel writes the buffer in place. Misses when unsafe."""

from __future__ import annotations

from graph_builder import Builder

from msprof_py.device.spec import DeviceSpec
from msprof_py.graph.ir import ValueRef
from msprof_py.graph.memory_plan import plan_memory
from msprof_py.graph.passes import run_passes

A2 = DeviceSpec.load("ascend910b")
X = (8, 16, 32, 32)
C = (16,)


def _bn_step(b: Builder, *, return_stats: bool = False):
    """conv-less BN training step: bn -> relu, epilogue copies into mean/var/nbt."""
    x = b.input("x", X)
    g, beta, mean, var = (b.param(n, C) for n in ("g", "beta", "mean", "var"))
    nbt = b.param("nbt", (1,))
    add = b.op("add", "add", [nbt], (1,), attrs={"other": 1})
    bn = b.op(
        "bn", "_native_batch_norm_legit_functional", [x, g, beta, mean, var],
        outputs=[X, C, C, C, C],
    )  # fmt: skip
    relu = b.op("relu", "relu", [bn], X)
    b.op("copy_nbt", "copy_", [nbt, add], (1,))
    b.op("copy_mean", "copy_", [mean, ValueRef("bn", 3)], C)
    b.op("copy_var", "copy_", [var, ValueRef("bn", 4)], C)
    outs = [relu, ValueRef("bn", 1), ValueRef("bn", 2)]
    if return_stats:  # the forward graph hands the new stats to the backward
        outs += [ValueRef("bn", 3), ValueRef("bn", 4)]
    return b.graph(*outs)


def test_bn_and_add_write_the_buffers_in_place() -> None:
    graph = _bn_step(Builder(A2))
    result = run_passes(graph, A2)
    assert [k.op_type for k in result.kernels] == ["Add", "BNTrainingUpdateReluV2"]
    add, bn = result.kernels
    assert add.outputs == (ValueRef("nbt"),)  # AssignAdd: the Add writes the buffer
    assert ValueRef("mean") in bn.outputs and ValueRef("var") in bn.outputs
    assert ValueRef("bn", 3) not in bn.outputs and ValueRef("bn", 4) not in bn.outputs
    hits = {r.nodes for r in result.records if r.pass_name == "AssignRemovePass" and r.hit}
    assert hits == {("add", "copy_nbt"), ("bn", "copy_mean"), ("bn", "copy_var")}
    assert result.removed["copy_mean"] == "assign removed: bn writes mean in place"
    # nothing left in the workspace: the new stats live in the buffers, the rest is returned
    assert plan_memory(graph, result.kernels).workspace_bytes == 0
    # without fusion (reduce-overhead capture) the copies stay
    unfused = run_passes(graph, A2, fuse=False)
    assert [k.op_type for k in unfused.kernels].count("Copy_") == 3


def test_returned_new_stats_are_written_both_in_place_and_out() -> None:
    graph = _bn_step(Builder(A2), return_stats=True)
    result = run_passes(graph, A2)
    [bn] = [k for k in result.kernels if "bn" in k.members]
    for ref in (ValueRef("bn", 3), ValueRef("bn", 4), ValueRef("mean"), ValueRef("var")):
        assert ref in bn.outputs
    assert not [k for k in result.kernels if "copy_" in k.name]


def test_unsafe_copies_are_misses() -> None:
    b = Builder(A2)
    x = b.input("x", C)
    w = b.param("w", C)
    twice = b.param("twice", C)
    upd = b.op("upd", "mul", [w], C, attrs={"other": 0.9})
    reader = b.op("reader", "neg", [w], C)  # reads w's old value besides upd
    b.op("copy_w", "copy_", [w, upd], C)
    a = b.op("a", "exp", [x], C)
    c = b.op("c", "neg", [x], C)
    b.op("copy_t1", "copy_", [twice, a], C)
    b.op("copy_t2", "copy_", [twice, c], C)
    result = run_passes(b.graph(reader), A2)
    misses = {
        r.nodes: r.reason for r in result.records if r.pass_name == "AssignRemovePass" and not r.hit
    }
    assert misses[("upd", "copy_w")] == "reader reads w's old value besides upd"
    assert misses[("a", "copy_t1")] == "twice is written by 2 ops"
    assert misses[("c", "copy_t2")] == "twice is written by 2 ops"
    assert sum(1 for k in result.kernels if k.members[0].startswith("copy_")) == 3
