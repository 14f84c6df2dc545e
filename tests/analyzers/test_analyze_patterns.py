"""Fusable patterns on the op sequence, present and absent, and their re-costed gain."""

from __future__ import annotations

import pytest
from analyze_helpers import Builder, chain

from msprof_py.analyzers import attention, context, patterns, recost
from msprof_py.device.spec import DeviceSpec

SPEC = DeviceSpec.load("ascend910b")
ACT = "8,16,32,32"
CONV = "Conv2D"


def conv_bn_relu(relu_input: str = ACT) -> list:
    return [
        (
            "aten::convolution_overrideable",
            "8,3,32,32;16,3,3,3",
            ACT,
            {"op_type": CONV, "task_type": "AI_CORE"},
        ),
        ("aten::add_", "", "", {"op_type": "Add", "task_type": "AI_CPU", "input_dtypes": "int64"}),
        ("aten::native_batch_norm", f"{ACT};16;16;16;16", ACT, {"op_type": "BNTrainingUpdate"}),
        ("aten::relu_", relu_input, relu_input, {"op_type": "Relu"}),
    ]


def found(b: Builder) -> list[tuple[str, str]]:
    matches, _ = patterns.find(context.prepare(b.build(), 0, warmup=0))
    return list(zip(matches["pattern"], matches["ops"], strict=True))


def test_conv_bn_relu_found_on_linked_ops() -> None:
    b = Builder().step(0, 0, 100_000)
    chain(b, 0, conv_bn_relu(), module="Net/Block")
    assert found(b) == [
        ("conv_bn_act", "convolution_overrideable+native_batch_norm+relu_"),
    ]  # the scalar counter update between conv and BN is left out


def test_conv_bn_relu_absent_when_the_data_does_not_flow() -> None:
    b = Builder().step(0, 0, 100_000)
    ops = conv_bn_relu()
    ops[2] = ("aten::native_batch_norm", "8,32,16,16;32;32;32;32", "8,32,16,16", {})
    chain(b, 0, ops)
    assert found(b) == []


def test_attention_ops_join_no_other_pattern() -> None:
    """Attention is matched on the dataflow (tests/analyzers/test_analyze_attention.py); the
    elementwise ops inside it do not make an elementwise chain of their own."""
    b = Builder().step(0, 0, 100_000)
    chain(
        b,
        0,
        [
            ("aten::bmm", "32,64,32;32,32,64", "32,64,64", {"task_type": "AI_CORE"}),
            ("aten::div", "8,4,64,64", "8,4,64,64", {}),
            ("aten::masked_fill_", "8,4,64,64;64,64", "8,4,64,64", {}),
            ("aten::_softmax", "8,4,64,64", "8,4,64,64", {}),
            ("aten::copy_", "8,4,64,32;8,4,64,32", "8,4,64,32", {"op_type": "ViewCopy"}),
            ("aten::bmm", "32,64,64;32,64,32", "32,64,32", {"task_type": "AI_CORE"}),
        ],
    )
    data = context.prepare(b.build(), 0, warmup=0)
    assert attention.find(data).matches["ops"].tolist() == [
        "bmm+div+masked_fill_+_softmax+copy_+bmm"
    ]
    assert found(b) == []


def test_patterns_do_not_cross_threads_and_skip_optimizer_steps() -> None:
    ew = [
        ("aten::add", "1000;1000", "1000", {}),
        ("aten::mul", "1000", "1000", {}),
        ("aten::add", "1000;1000", "1000", {}),
    ]
    b = Builder().step(0, 0, 100_000)
    t = chain(b, 0, ew[:2], thread=1)
    t = chain(b, t, ew[2:], thread=2)
    assert found(b) == []
    b = Builder().step(0, 0, 100_000)
    b.event("annotation", "Optimizer.step#SGD.step", 0, 50_000)
    chain(b, 1000, ew)
    assert found(b) == []
    b = Builder().step(0, 0, 100_000)
    chain(b, 1000, ew)
    assert found(b) == [("elementwise", "add+mul+add")]


def test_elementwise_fusion_recost_by_hand() -> None:
    n = 1_000_000  # fp32 elements: 4 MB per tensor
    cols = {"flops": float(n), "bytes": 8_000_000}
    b = Builder().step(0, 0, 1_000_000)
    chain(
        b,
        0,
        [
            ("aten::add", f"{n}", f"{n}", cols),
            ("aten::mul", f"{n}", f"{n}", cols),
            ("aten::add", f"{n}", f"{n}", cols),
        ],
        host_ns=10_000,
        kernel_ns=10_000,
    )
    data = context.prepare(b.build(), 0, warmup=0)
    row = recost.fusion(data).iloc[0]
    v = SPEC.vector
    vector = 3 * n * 4 / v.bytes_per_cycle / v.cores / v.clock_hz / v.efficiency * 1e9
    external = 24_000_000 - 2 * 8_000_000  # two intermediates no longer written and read
    memory = external / SPEC.memory.effective_bandwidth * 1e9
    assert memory > vector
    fused = SPEC.dispatch.device_sched_ns + memory
    assert row["kernels"] == 3 and row["device_ns"] == 30_000
    assert row["fused_ns"] == pytest.approx(fused)
    assert row["saved_ns"] == pytest.approx(30_000 - fused)
    assert row["host_saved_ns"] == 20_000


def test_vector_term_matches_the_cost_model() -> None:
    from msprof_py.device import costmodel

    cost = costmodel.vector_cost(
        SPEC,
        elements=1 << 20,
        dtype="float16",
        bytes_moved=0,
        ops_per_element=4,
        block_dim=SPEC.vector.cores,
    )
    import numpy as np

    ours = recost.vector_ns(SPEC, np.array([4.0 * (1 << 20)]), np.array([2]))[0]
    assert ours == pytest.approx(cost.vector_ns, rel=1e-3)


def _act_chain(n: int, first: str = "aten::mul") -> list:
    """Three linked elementwise ops on ``n`` fp32 elements: ``first``, sigmoid, add."""
    return [
        (first, f"{n};{n}", f"{n}", {}),
        ("aten::sigmoid", f"{n}", f"{n}", {}),
        ("aten::add", f"{n};{n}", f"{n}", {}),
    ]


def _mm() -> list:
    """A matmul whose input has the 1000 elements of a chain before it, output 200."""
    return [("aten::mm", "10,100;100,20", "10,20", {"task_type": "AI_CORE"})]


def test_chains_stop_at_step_boundaries_without_annotations() -> None:
    """No annotation sits between the steps: the step column alone must split the chains."""
    b = Builder().step(0, 0, 50_000).step(1, 50_000, 100_000)
    chain(b, 1000, _act_chain(1000), step=0)
    chain(b, 51_000, _act_chain(1000), step=1)
    matches, _ = patterns.find(context.prepare(b.build(), 0, warmup=0))
    assert matches["ops"].tolist() == ["mul+sigmoid+add"] * 2
    assert matches["step"].tolist() == [0, 1]


def test_back_to_back_chains_of_different_shapes_are_both_found() -> None:
    b = Builder().step(0, 0, 100_000)
    t = chain(b, 0, _act_chain(1000))
    chain(b, t, _act_chain(2000))  # its first op does not consume the first chain's output
    assert found(b) == [("elementwise", "mul+sigmoid+add")] * 2


def test_chain_matmul_chain_finds_both_chains() -> None:
    """The add right after the matmul heads a three-op chain: the chain is worth more than a
    bias-add epilogue (two launches saved instead of one), so both chains are found."""
    b = Builder().step(0, 0, 100_000)
    t = chain(b, 0, _act_chain(1000, first="aten::add"))
    t = chain(b, t, _mm())
    chain(b, t, [("aten::add", "200;200", "200", {}), *_act_chain(200)[:2]])
    assert found(b) == [("elementwise", "add+sigmoid+add"), ("elementwise", "add+mul+sigmoid")]


def test_matmul_bias_add_alone_is_still_an_epilogue() -> None:
    b = Builder().step(0, 0, 100_000)
    t = chain(b, 0, _mm())
    chain(
        b, t, [("aten::add", "200;200", "200", {}), ("aten::bmm", "2,10,10;2,10,10", "2,10,10", {})]
    )
    assert found(b) == [("matmul_epilogue", "mm+add")]


def test_a_loop_over_tensors_of_one_size_is_no_chain() -> None:
    """Gradient clipping's ``g.mul_(coef)`` over three biases of 128 elements: each op writes
    a tensor of its own, though the sizes match; the same loop's ops of other sizes around
    them must not make a chain either (found with the transformer sample)."""
    b = Builder().step(0, 0, 100_000)
    loop = [("aten::mul_", f"{n};", f"{n}", {}) for n in (16384, 128, 128, 128, 65536)]
    t = chain(b, 0, loop)
    chain(b, t, _act_chain(1000))  # a real chain after the loop is still found
    assert found(b) == [("elementwise", "mul+sigmoid+add")]
