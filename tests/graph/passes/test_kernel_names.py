"""Kernel names are unique in a graph: a node with several eager kernels never takes the name
of another node (``x_1``) or of another node's kernel."""

from __future__ import annotations

from graph_builder import Builder

from msprof_py.device.spec import DeviceSpec
from msprof_py.graph.ir import (
    Graph,
    KernelSpec,
    Node,
    NodeKind,
    ValueRef,
    kernel_names,
    unfused_kernels,
)
from msprof_py.graph.passes import run_passes

A2 = DeviceSpec.load("ascend910b")


def _with_kernels(graph: Graph, counts: dict[str, int]) -> Graph:
    """``graph`` with the named nodes given that many copies of their kernel."""
    nodes = []
    for node in graph.nodes:
        if node.name in counts:
            kernels = tuple(
                KernelSpec(f"K{i}", node.kernels[0].cost) for i in range(counts[node.name])
            )
            node = Node(
                node.name, NodeKind.OP, node.target, node.inputs, node.outputs, node.attrs, kernels
            )
        nodes.append(node)
    return Graph(graph.name, nodes, graph.outputs)


def _graph(counts: dict[str, int]) -> Graph:
    """x -> attn (2 kernels) -> attn_1 -> attn_k0 (a vector op each) -> out."""
    b = Builder(A2)
    x = b.input("x", (64, 64))
    a = b.op("attn", "exp", [x])
    a1 = b.op("attn_1", "neg", [a])
    a2 = b.op("attn_k0", "abs", [a1])
    out = b.op("out", "sin", [a2])
    return _with_kernels(b.graph(out), counts)


def test_two_kernels_of_x_do_not_clash_with_node_x_1() -> None:
    graph = _graph({"attn": 2})
    names = [k.name for k in unfused_kernels(graph)]
    assert len(set(names)) == len(names)
    # attn_0 / attn_1 would clash with node attn_1, attn_k0 with node attn_k0
    assert names == ["attn_k0_2", "attn_k1_2", "attn_1", "attn_k0", "out"]
    assert [k.members for k in unfused_kernels(graph)][:2] == [("attn",), ("attn",)]


def test_usual_names_and_fallback_per_node() -> None:
    graph = _graph({"attn_1": 2, "out": 3})
    assert kernel_names(graph) == {
        "attn": ("attn",),
        "attn_1": ("attn_1_0", "attn_1_1"),
        "attn_k0": ("attn_k0",),
        "out": ("out_0", "out_1", "out_2"),
    }


def test_kernels_of_different_nodes_never_share_a_name() -> None:
    """Node ``a`` with 12 kernels wants ``a_11``; node ``a_1`` with 2 wants ``a_1_1``... and
    ``a_11`` is also a node: every name stays unique, the same on every call."""
    b = Builder(A2)
    x = b.input("x", (8, 8))
    a = b.op("a", "exp", [x])
    a1 = b.op("a_1", "neg", [a])
    a11 = b.op("a_11", "abs", [a1])
    graph = _with_kernels(b.graph(a11), {"a": 12, "a_1": 2, "a_11": 2})
    names = [k.name for k in unfused_kernels(graph)]
    assert len(names) == 16 and len(set(names)) == 16
    assert names == [k.name for k in unfused_kernels(graph)]
    assert kernel_names(graph)["a_1"] == ("a_1_0", "a_1_1")
    assert kernel_names(graph)["a"][0] == "a_k0"


def test_the_passes_launch_the_same_unique_names() -> None:
    graph = _graph({"attn": 2})
    result = run_passes(graph, A2, fuse=False)
    assert [k.name for k in result.kernels] == [k.name for k in unfused_kernels(graph)]
    assert ValueRef("out") in graph.outputs
