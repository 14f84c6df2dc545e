"""torch.compile is never proposed (npu graphs run op by op under aot_eager, fusing nothing),
and a model that is already compiled is recognised from its module path."""

from __future__ import annotations

import re

from analyze_helpers import Builder, chain

from msprof_py.analyzers import context, engine
from msprof_py.analyzers.findings import FIRED, rule_specs
from msprof_py.analyzers.rules_compute import RuleContext

ACT = "8,16,32,32"


def conv_bn_relu(module: str):
    b = Builder().step(0, 0, 100_000)
    chain(
        b,
        0,
        [
            ("aten::convolution_overrideable", "8,3,32,32;16,3,3,3", ACT,
             {"op_type": "Conv2D", "task_type": "AI_CORE", "bytes": 600_000}),
            ("aten::native_batch_norm", f"{ACT};16;16;16;16", ACT, {"bytes": 1_048_576}),
            ("aten::relu_", ACT, ACT, {"bytes": 1_048_576}),
        ],
        module=module,
    )  # fmt: skip
    data = context.prepare(b.build(), 0, warmup=0)
    return engine.run_rule("fusion_conv_bn_relu", RuleContext(data, {0: data}))


def test_no_rule_proposes_torch_compile() -> None:
    for name, spec in rule_specs().items():
        for sentence in re.split(r"(?<=[.;])\s", spec.advice):
            if "torch.compile" in sentence:
                assert re.search(r"does not|fuses nothing", sentence), (name, sentence)


def test_a_compiled_model_is_recognised() -> None:
    f = conv_bn_relu("OptimizedModule/Net/GraphModule")
    assert f.status == FIRED
    assert f.evidence["compiled"] is True
    assert "already compiled (OptimizedModule and GraphModule" in f.advice


def test_an_eager_model_gets_no_compile_note() -> None:
    f = conv_bn_relu("Net/Conv2d")
    assert f.status == FIRED and f.evidence["compiled"] is False
    assert "already compiled" not in f.advice
    assert "fuse_modules" in f.advice
