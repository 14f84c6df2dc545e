"""SdpaFlashAttentionPass / SdpaFlashAttentionGradPass on hand-built graphs: a fused-attention
node is a hit whose record lists the FlashAttentionScore attributes; an SDPA call traced as
torch's decomposition is a miss with its reason; kernels are left as they are."""

from __future__ import annotations

from msprof_py.device.costmodel import vector_cost
from msprof_py.device.spec import DeviceSpec
from msprof_py.graph.ir import Graph, KernelSpec, Node, NodeKind, PassRecord, TensorSpec, ValueRef
from msprof_py.graph.passes import run_passes
from msprof_py.graph.passes.sdpa import FUSED, FUSED_GRAD, SDPA_GRAD_PASS, SDPA_PASS

A2 = DeviceSpec.load("ascend910b")
B, N, KV, S, D = 2, 4, 2, 16, 32


def _input(name: str, shape: tuple[int, ...], dtype: str = "float16") -> Node:
    return Node(name, NodeKind.INPUT, outputs=(TensorSpec(shape, dtype),))


def _kernel(op_type: str) -> KernelSpec:
    return KernelSpec(
        op_type, vector_cost(A2, elements=1 << 16, dtype="float16", bytes_moved=1 << 17)
    )


def _attention_graph(mask_dtype: str | None, attrs: dict) -> Graph:
    nodes = [_input("q", (B, N, S, D)), _input("k", (B, KV, S, D)), _input("v", (B, KV, S, D))]
    ins = [ValueRef(n) for n in "qkv"]
    if mask_dtype is not None:
        nodes.append(_input("mask", (B, 1, S, S), mask_dtype))
        ins.append(ValueRef("mask"))
    else:
        attrs = {"attn_bias": None, **attrs}
    out = (TensorSpec((B, N, S, D), "float16"), TensorSpec((B, N, S), "float32"))
    kernels = (_kernel("FlashAttentionScore"),)
    nodes.append(Node("sdpa", NodeKind.OP, FUSED, tuple(ins), out, attrs, kernels))
    return Graph("g_forward", nodes, (ValueRef("sdpa"),))


def _records(graph: Graph, name: str) -> list[PassRecord]:
    return [r for r in run_passes(graph, A2).records if r.pass_name == name]


def test_bool_mask_gqa_dropout_node_is_a_hit_with_its_attributes() -> None:
    graph = _attention_graph("bool", {"dropout_p": 0.25, "is_causal": False, "scale": 0.5})
    result = run_passes(graph, A2)
    [hit] = [r for r in result.records if r.pass_name == SDPA_PASS]
    assert hit.hit and hit.nodes == ("sdpa",)
    for attr in (
        "input_layout=BNSD",
        f"head_num={N}",
        f"kv_head_num={KV}",
        "scale_value=0.5",
        "keep_prob=0.75",
        "sparse_mode=0",
        f"atten_mask=[{B}, 1, {S}, {S}] bool",
    ):
        assert attr in hit.reason, attr
    # the node's own kernel is launched unchanged
    assert [k.op_type for k in result.kernels] == ["FlashAttentionScore"]


def test_additive_mask_is_pse_and_causal_is_sparse_mode_2() -> None:
    [additive] = _records(_attention_graph("float16", {"dropout_p": 0.0, "scale": None}), SDPA_PASS)
    assert f"pse=[{B}, 1, {S}, {S}] float16" in additive.reason
    assert (
        f"scale_value={round(D**-0.5, 6)}" in additive.reason and "keep_prob=1.0" in additive.reason
    )
    [causal] = _records(_attention_graph(None, {"dropout_p": 0.0, "is_causal": True}), SDPA_PASS)
    assert "sparse_mode=2" in causal.reason and "atten_mask=causal" in causal.reason
    assert "pse" not in causal.reason


def test_gradient_node_is_a_grad_hit() -> None:
    nodes = [_input(n, (B, N if n in ("do", "q") else KV, S, D)) for n in ("do", "q", "k", "v")]
    nodes.append(_input("mask", (B, 1, S, S), "bool"))
    ins = tuple(ValueRef(n.name) for n in nodes)
    grads = tuple(n.outputs[0] for n in nodes[1:4])
    attrs = {"dropout_p": 0.0, "is_causal": False, "scale": None}
    kernels = (_kernel("FlashAttentionScoreGrad"),)
    nodes.append(Node("sdpa_bw", NodeKind.OP, FUSED_GRAD, ins, grads, attrs, kernels))
    graph = Graph("g_backward", nodes, (ValueRef("sdpa_bw"),))
    [hit] = _records(graph, SDPA_GRAD_PASS)
    assert hit.hit and f"head_num={N}" in hit.reason and f"kv_head_num={KV}" in hit.reason
    assert "atten_mask=[2, 1, 16, 16] bool" in hit.reason
    assert not _records(graph, SDPA_PASS)


def test_traced_decomposition_misses_are_listed_with_their_reason() -> None:
    why = "unsupported mask shape [2, 1, 1, 16]"
    nodes = [
        _input("x", (B, S)),
        Node("neg", NodeKind.OP, "neg", (ValueRef("x"),), (TensorSpec((B, S), "float16"),)),
    ]
    graph = Graph(
        "g", nodes, (ValueRef("neg"),), notes=(PassRecord(SDPA_PASS, ("neg",), False, why),)
    )
    [miss] = _records(graph, SDPA_PASS)
    assert not miss.hit and miss.reason == why
    assert not _records(Graph("g", nodes, (ValueRef("neg"),)), SDPA_PASS)  # no SDPA: no record
