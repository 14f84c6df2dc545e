"""torch.compile is proposed as graph mode (backend="npu") for eager code, never for ops that
already run in compiled graphs; fusion findings quote what the graph passes did."""

from __future__ import annotations

import re

from analyze_helpers import Builder, chain

from msprof_py.analyzers import context, engine, graphs
from msprof_py.analyzers.findings import FIRED, OK, rule_specs
from msprof_py.analyzers.rules_compute import RuleContext

ACT = "8,16,32,32"
CONV_BN_RELU = [
    ("aten::convolution_overrideable", "8,3,32,32;16,3,3,3", ACT,
     {"op_type": "Conv2D", "task_type": "AI_CORE", "bytes": 600_000}),
    ("aten::native_batch_norm", f"{ACT};16;16;16;16", ACT, {"bytes": 1_048_576}),
    ("aten::relu_", ACT, ACT, {"bytes": 1_048_576}),
]  # fmt: skip
BN_MISS = "BN weight is a PARAM, not Const (training graph)"


def run(b: Builder, rule: str):
    data = context.prepare(b.build(), 0, warmup=0)
    return engine.run_rule(rule, RuleContext(data, {0: data}))


def eager(module: str = "Net/Conv2d") -> Builder:
    b = Builder().step(0, 0, 100_000)
    chain(b, 0, CONV_BN_RELU, module=module)
    return b


def with_graph(b: Builder, start: int = 40_000) -> Builder:
    """A compiled graph (its last plan: ZBN fired, ConvBN missed) called once in the step:
    two kernels of 20 us."""
    b.graph_plan(
        "graph0_forward",
        [
            ("ZBNupdateReluV2Conv2DBNreducePass", "bn;relu", True, ""),
            ("ConvBatchnormFusionPass", "convolution;bn", False, BN_MISS),
            ("ConvBatchnormFusionPass", "convolution_1;bn_1", False, BN_MISS),
        ],
        kernels=2,
        fused_kernels=1,
        code="forward (net.py:3)",
        compiles=1,
    )
    b.graph_call(
        "graph0_forward",
        start,
        start + 5000,
        [
            {"start": start + 5000, "end": start + 25_000, "name": "convolution"},
            {"start": start + 25_000, "end": start + 45_000, "name": "bn"},
        ],
    )
    return b


def test_compile_is_proposed_only_as_graph_mode() -> None:
    for name, spec in rule_specs().items():
        assert "aot_eager" not in spec.advice, name
        for sentence in re.split(r"(?<=[.;])\s", spec.advice):
            if "torch.compile(" in sentence:
                assert 'backend="npu"' in sentence, (name, sentence)


def test_an_eager_model_is_told_to_compile() -> None:
    f = run(eager(), "fusion_conv_bn_relu")
    assert f.status == FIRED and f.evidence["compiled"] is False
    assert 'torch.compile(model, backend="npu")' in f.advice
    assert "already" not in f.advice and f.evidence["graph_passes"] == []


def test_a_model_compiled_with_another_backend_is_told_to_use_graph_mode() -> None:
    f = run(eager("OptimizedModule/Net/GraphModule"), "fusion_conv_bn_relu")
    assert f.status == FIRED and f.evidence["compiled"] is True
    assert "already compiled (OptimizedModule and GraphModule" in f.advice
    assert 'compile with backend="npu"' in f.advice


def test_eager_chains_beside_graphs_quote_the_passes() -> None:
    f = run(with_graph(eager()), "fusion_conv_bn_relu")
    assert f.status == FIRED  # the eager chain (outside the graph) still runs unfused
    # the graph holds 40 of the 55 us of device time (15 us: the eager chain's 3 kernels)
    assert "already runs in graph mode (1 compiled graph, 73% of the device time)" in f.advice
    assert (
        "In the compiled graphs: ConvBatchnormFusionPass missed 2x: BN weight is a PARAM, not "
        "Const (training graph); ZBNupdateReluV2Conv2DBNreducePass fired on 1 match."
    ) in f.message
    misses = [r for r in f.evidence["graph_passes"] if not r["hit"]]
    assert misses == [
        {
            "pass_name": "ConvBatchnormFusionPass",
            "hit": False,
            "count": 2,
            "reason": BN_MISS,
            "nodes": "convolution;bn",
        }
    ]


def test_compiled_code_alone_is_not_told_to_compile() -> None:
    b = with_graph(Builder().step(0, 0, 100_000), start=0)
    f = run(b, "fusion_conv_bn_relu")
    assert f.status == OK  # the chains run inside the graph: nothing eager to fuse
    assert "torch.compile" not in f.message + f.advice
    assert "ZBNupdateReluV2Conv2DBNreducePass fired on 1 match" in f.message


def dispatch(graph_share: bool) -> Builder:
    """Short kernels each issued 10 us after the previous one ended (host-bound), by eager
    ops or by graph calls."""
    b = Builder().step(0, 0, 10)
    t = 0
    if graph_share:
        b.graph_plan("graph0_forward", kernels=1, code="f (a.py:1)", compiles=1)
    for _ in range(8):
        k = {"start": t + 11_000, "end": t + 14_000}
        if graph_share:
            b.graph_call("graph0_forward", t, t + 11_000, [k | {"name": "add"}])
        else:
            b.op("aten::add", t, t + 11_000, [k])
        t += 13_000
    b.steps[0]["end_ns"] = t + 1000
    return b


def test_host_bound_eager_dispatch_is_told_to_compile() -> None:
    f = run(dispatch(False), "host_bound_dispatch")
    assert f.status == FIRED
    assert 'compile the model in graph mode (torch.compile(model, backend="npu")' in f.advice


def test_host_bound_graph_dispatch_is_not_told_to_compile() -> None:
    b = dispatch(True)
    data = context.prepare(b.build(), 0, warmup=0)
    split = graphs.split(data)
    assert split["graph_host_share"] == 1.0 and split["graph_calls_per_step"] == 8
    f = engine.run_rule("host_bound_dispatch", RuleContext(data, {0: data}))
    assert f.status == FIRED
    assert "torch.compile" not in f.advice
    assert "already goes to compiled graphs (100%" in f.advice


def test_a_compiled_model_whose_optimizer_dispatch_is_left_is_pointed_at_the_optimizer() -> None:
    """One graph call, then an eager optimizer step issuing short kernels one by one (what the
    ResNet sample leaves once compiled): compiling again is not proposed, and the recipe is
    gone; the advice names the optimizer's share."""
    b = Builder().step(0, 0, 10)
    b.graph_plan("graph0_forward", kernels=1, code="f (a.py:1)", compiles=1)
    b.graph_call("graph0_forward", 0, 11_000, [{"start": 11_000, "end": 14_000, "name": "add"}])
    t = 13_000
    start = t
    for _ in range(8):  # 8 eager ops of 11 us in Optimizer.step: 88 of the 99 us eager host
        b.op("aten::add_", t, t + 11_000, [{"start": t + 11_000, "end": t + 14_000}])
        t += 13_000
    b.event("annotation", "Optimizer.step#SGD.step", start, t)
    b.op("aten::add", t, t + 11_000, [{"start": t + 11_000, "end": t + 14_000}])
    t += 13_000
    b.steps[0]["end_ns"] = t + 1000
    data = context.prepare(b.build(), 0, warmup=0)
    split = graphs.split(data)
    assert split["optimizer_host_ns_per_step"] == 88_000
    assert split["optimizer_host_share"] == 88 / 99
    f = engine.run_rule("host_bound_dispatch", RuleContext(data, {0: data}))
    assert f.status == FIRED
    assert "torch.compile" not in f.advice and "apply" not in f.evidence
    assert "mostly the optimizer step's (89% of it" in f.advice
    assert "compiling that code too" not in f.advice
    plain = run(dispatch(False), "host_bound_dispatch")  # eager: the recipe is there
    assert plain.evidence["apply"] == {"compile": "npu"}


def test_a_compiled_model_whose_eager_dispatch_is_outside_it_is_not_told_to_compile() -> None:
    """One graph call (the model), then eager ops outside any module and outside the
    optimizer step (gradient clipping's per-tensor muls, the loss): compiling the model
    cannot reach them, so the recipe is gone and the advice says why; a model op left eager
    (a graph break in a module) is still the model's."""

    def build(module: str) -> context.RankData:
        b = Builder().step(0, 0, 10)
        b.graph_plan("graph0_forward", kernels=1, code="f (a.py:1)", compiles=1)
        b.graph_call("graph0_forward", 0, 11_000, [{"start": 11_000, "end": 14_000, "name": "add"}])
        t = 13_000
        for i in range(8):  # 8 eager ops of 11 us; the first in `module`
            b.op("aten::mul_", t, t + 11_000, [{"start": t + 11_000, "end": t + 14_000}],
                 module=module if i < 5 else "")  # fmt: skip
            t += 13_000
        b.steps[0]["end_ns"] = t + 1000
        return context.prepare(b.build(), 0, warmup=0)

    outside = build("")
    split = graphs.split(outside)
    assert split["model_host_ns_per_step"] == 0 and split["model_host_share"] == 0
    f = engine.run_rule("host_bound_dispatch", RuleContext(outside, {0: outside}))
    assert f.status == FIRED and "apply" not in f.evidence
    assert "eager dispatch left is outside it (100% of it" in f.advice
    assert "torch.compile" not in f.advice and "compiling that code too" not in f.advice
    broken = build("Net/Linear")  # 5 of the 8 eager ops run in the model: a graph break
    split = graphs.split(broken)
    assert split["model_host_ns_per_step"] == 55_000 and split["model_host_share"] == 55 / 88
    f = engine.run_rule("host_bound_dispatch", RuleContext(broken, {0: broken}))
    assert f.evidence["apply"] == {"compile": "npu"}
