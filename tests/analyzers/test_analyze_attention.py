"""Attention found on the dataflow, on hand-built and recorded profiles, and its re-cost."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from analyze_helpers import Builder, chain

from msprof_py.analyzers import attention, context, engine, recost
from msprof_py.analyzers.findings import FIRED, OK
from msprof_py.analyzers.rules_compute import RuleContext

SCORES = "8,4,64,64"  # batch 8 x 4 heads, 64 queries x 64 keys
QK = (
    "aten::bmm",
    "32,64,32;32,32,64",
    "32,64,64",
    {"task_type": "AI_CORE", "op_type": "BatchMatMul"},
)
PV = (
    "aten::bmm",
    "32,64,64;32,64,32",
    "32,64,32",
    {"task_type": "AI_CORE", "op_type": "BatchMatMul"},
)


def matches(b: Builder) -> list[str]:
    return attention.find(context.prepare(b.build(), 0, warmup=0)).matches["ops"].tolist()


@pytest.mark.parametrize("recorded_between", [False, True])
def test_backward_of_an_unrecorded_view_inside_the_attention(recorded_between: bool) -> None:
    """Forward ops 10, 12, 13 leave number 11 to a view the recorder never saw (the output's
    ``transpose(1, 2)``): the layout copy its backward runs (node 10) belongs to the
    attention. Where a recorded op outside the attention holds 11 (a learned bias), its
    backward stays."""
    b = Builder().step(0, 0, 400_000)
    t = chain(b, 0, [QK, ("aten::_softmax", SCORES, SCORES, {}), PV])
    for op, seq in zip([e for e in b.host if e["kind"] == "op"], (10, 12, 13), strict=True):
        op["sequence"] = seq
    if recorded_between:
        b.op("aten::mul", 1_500, 1_600, [dict(start=2_000, end=2_100)], sequence=11, step=0)
    back = [
        ("aten::bmm", "32,64,32;32,32,64", "32,64,64", {"task_type": "AI_CORE"}),
        ("aten::_softmax_backward_data", f"{SCORES};{SCORES}", SCORES, {}),
        ("aten::copy_", "8,4,64,32;8,4,64,32", "8,4,64,32", {}),
        ("aten::bmm", "32,64,64;32,64,32", "32,64,32", {"task_type": "AI_CORE"}),
    ]
    first = len(b.host)
    chain(b, t, back, thread=2)
    ops = [e for e in b.host[first:] if e["kind"] == "op"]
    for op, seq in zip(ops, (12, 11, 10, 9), strict=True):
        op["sequence"] = seq
    members = attention.find(context.prepare(b.build(), 0, warmup=0)).members
    backward = set(members.loc[members["phase"] == "backward", "event_id"])
    copy = ops[2]["event_id"]
    assert backward == {op["event_id"] for op in ops} - ({copy} if recorded_between else set())


def test_masks_built_with_eq_and_safe_softmax_sit_between() -> None:
    """The mask is built with ``==`` on its own shape (it consumes nothing the matmul wrote,
    which broke the op-sequence pattern), then masked_fill and _safe_softmax."""
    b = Builder().step(0, 0, 200_000)
    chain(b, 0, [
        QK,
        ("aten::eq", "8,1,1,64", "8,1,1,64", {}),
        ("aten::mul", SCORES, SCORES, {}),
        ("aten::masked_fill", f"{SCORES};8,1,1,64", SCORES, {}),
        ("aten::_safe_softmax", SCORES, SCORES, {}),
        ("aten::native_dropout", SCORES, SCORES, {"op_type": "DropOutDoMask"}),
        PV,
    ], module="Net/Attention")  # fmt: skip
    data = context.prepare(b.build(), 0, warmup=0)
    found = attention.find(data)
    (row,) = found.matches.itertuples()
    assert row.ops == "bmm+mul+masked_fill+_safe_softmax+native_dropout+bmm"  # not the eq
    assert (row.batch, row.sq, row.skv, row.d, row.dv) == (32, 64, 64, 32, 32)
    assert row.masked and row.dropout and row.module == "Net/Attention"
    assert len(found.members) == 6


def no_attention_cases() -> dict[str, list]:
    other = "8,4,64,32"
    return {
        "softmax of another tensor": [QK, ("aten::_softmax", other, other, {}), PV],
        "another matmul between": [
            QK, ("aten::_softmax", SCORES, SCORES, {}),
            ("aten::mm", "64,64;64,64", "64,64", {"task_type": "AI_CORE"}), PV,
        ],
        "softmax over another dim": [
            QK, ("aten::_softmax", "8,4,64,64,1", "8,4,64,64,1", {}), PV,
        ],
        "classifier (2-D matmuls)": [
            ("aten::addmm", "10;8,32;32,10", "8,10", {"task_type": "AI_CORE"}),
            ("aten::_softmax", "8,10", "8,10", {}),
            ("aten::mm", "8,10;10,10", "8,10", {"task_type": "AI_CORE"}),
        ],
        "second matmul of other rows": [
            QK, ("aten::_softmax", SCORES, SCORES, {}),
            ("aten::bmm", "32,64,64;32,64,32", "32,32,32", {"task_type": "AI_CORE"}),
        ],
    }  # fmt: skip


@pytest.mark.parametrize("case", sorted(no_attention_cases()))
def test_no_attention_where_the_data_does_not_flow(case: str) -> None:
    b = Builder().step(0, 0, 200_000)
    chain(b, 0, no_attention_cases()[case])
    assert matches(b) == []


def test_matmuls_of_different_modules_are_no_attention() -> None:
    b = Builder().step(0, 0, 200_000)
    t = chain(b, 0, [QK, ("aten::_softmax", SCORES, SCORES, {})], module="A")
    chain(b, t, [PV], module="B")
    assert matches(b) == []


def test_backward_found_by_sequence_number() -> None:
    """The recorder gives a forward op the number after its grad_fn's: the backward of
    forward ops 10, 12, 13 runs in nodes 9, 11, 12; node 5 belongs to another op."""
    b = Builder().step(0, 0, 400_000)
    t = chain(b, 0, [QK, ("aten::_softmax", SCORES, SCORES, {}), PV])
    for op, seq in zip([e for e in b.host if e["kind"] == "op"], (10, 12, 13), strict=True):
        op["sequence"] = seq
    back = [
        ("aten::bmm", "32,64,32;32,32,64", "32,64,64", {"task_type": "AI_CORE"}),
        ("aten::_softmax_backward_data", f"{SCORES};{SCORES}", SCORES, {}),
        ("aten::bmm", "32,64,64;32,64,32", "32,64,32", {"task_type": "AI_CORE"}),
        ("aten::add", "100;100", "100", {}),
    ]
    first = len(b.host)
    chain(b, t, back, thread=2)
    ops = [e for e in b.host[first:] if e["kind"] == "op"]
    for op, seq in zip(ops, (12, 11, 9, 5), strict=True):
        op["sequence"] = seq
    data = context.prepare(b.build(), 0, warmup=0)
    members = attention.find(data).members
    backward = members[members["phase"] == "backward"]["event_id"]
    assert sorted(backward) == sorted(op["event_id"] for op in ops[:3])
    costs = recost.attention(data)
    assert bool(costs["has_backward"].iat[0])
    assert costs["kernels"].iat[0] == 6
    assert costs["device_ns"].iat[0] == pytest.approx(6 * 5000)


# ---- recorded profiles ---------------------------------------------------------------------

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional


def record(build: Callable[[], tuple[object, object, Callable]], steps: int = 2):
    """RankData of ``steps`` training steps of ``build()``'s (model, input, loss)."""
    import msprof_py

    with msprof_py.record() as rec:
        model, x, loss = build()
        model, x = model.to("npu"), x.to("npu")
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for _ in range(steps):
            opt.zero_grad()
            loss(model, x).backward()
            opt.step()
    return context.prepare(rec.load(), 0, warmup=0)


def finding(data):
    return engine.run_rule("fusion_attention", RuleContext(data, {0: data}))


def _transformers():
    conformance = str(Path(__file__).parents[1] / "conformance")
    if conformance not in sys.path:
        sys.path.insert(0, conformance)
    import torchvision_guard

    torchvision_guard.guard()
    return pytest.importorskip("transformers")


def gpt2():
    tf = _transformers()
    config = tf.GPT2Config(vocab_size=96, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                           bos_token_id=1, eos_token_id=2)  # fmt: skip
    config._attn_implementation = "eager"
    return tf.GPT2LMHeadModel(config), torch.randint(1, 96, (2, 12)), _lm_loss


def bert():
    tf = _transformers()
    config = tf.BertConfig(vocab_size=96, hidden_size=32, num_hidden_layers=2,
                           num_attention_heads=4, intermediate_size=64,
                           max_position_embeddings=32)  # fmt: skip
    config._attn_implementation = "eager"
    return tf.BertForMaskedLM(config), torch.randint(1, 96, (2, 12)), _lm_loss


def _lm_loss(model, ids):
    mask = torch.ones_like(ids)
    mask[1, -3:] = 0  # padding: a real mask enters the scores
    return model(input_ids=ids, attention_mask=mask, labels=ids).loss


def mha():
    m = nn.MultiheadAttention(32, 4, batch_first=True)
    return m, torch.randn(2, 12, 32), lambda m, x: m(x, x, x)[0].sum()


class Heads(nn.Module):
    """q, k, v of 4 heads from one projection, then ``attend(q, k, v)``."""

    def __init__(self, attend: Callable) -> None:
        super().__init__()
        self.qkv = nn.Linear(32, 96)
        self.attend = attend

    def forward(self, x):
        q, k, v = self.qkv(x).view(2, 12, 3, 4, 8).permute(2, 0, 3, 1, 4)
        return self.attend(q, k, v)


def sdpa_math():
    math_path = torch.ops.aten._scaled_dot_product_attention_math
    m = Heads(lambda q, k, v: math_path(q, k, v, is_causal=True)[0])
    return m, torch.randn(2, 12, 32), lambda m, x: m(x).sum()


def sdpa_fp32():
    m = Heads(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    return m, torch.randn(2, 12, 32), lambda m, x: m(x).sum()


def mlp():
    m = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10), nn.Softmax(-1),
                      nn.Linear(10, 10))  # fmt: skip
    return m, torch.randn(8, 32), lambda m, x: m(x).sum()


def cnn():
    m = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(),
                      nn.Linear(8 * 6 * 6, 10), nn.Softmax(-1))  # fmt: skip
    return m, torch.randn(4, 3, 8, 8), lambda m, x: m(x).sum()


FOUND = {"gpt2": (gpt2, 2), "bert": (bert, 2), "mha": (mha, 1), "sdpa_math": (sdpa_math, 1),
         "sdpa_fp32": (sdpa_fp32, 1)}  # fmt: skip


@pytest.mark.parametrize("name", sorted(FOUND))
def test_attention_found_in_recorded_forms(name: str) -> None:
    build, per_step = FOUND[name]
    data = record(build)
    found = attention.find(data)
    assert len(found.matches) == 2 * per_step  # every layer, both steps
    assert set(found.matches[["batch", "sq", "skv", "d"]].itertuples(index=False)) == {
        (8, 12, 12, 8)
    }  # batch 2 x 4 heads, 12 tokens, head dim 8
    costs = recost.attention(data)
    assert costs["has_backward"].all()  # the backward was paired with every forward
    f = finding(data)
    assert f.status == FIRED, f.message
    assert f.estimated_gain_us > 0 and "npu_fusion_attention" in f.advice


@pytest.mark.parametrize("build", [mlp, cnn], ids=["mlp", "cnn"])
def test_no_attention_in_models_without_one(build) -> None:
    data = record(build)
    assert attention.find(data).matches.empty
    assert finding(data).status == OK


class Attend(nn.Module):
    """Self-attention on [2, 16, 64] (4 heads of 16): explicit, or npu_fusion_attention."""

    def __init__(self, fused: bool) -> None:
        super().__init__()
        self.qkv = nn.Linear(64, 192)
        self.fused = fused

    def forward(self, x):
        q, k, v = self.qkv(x).split(64, dim=2)
        if self.fused:
            import torch_npu

            return torch_npu.npu_fusion_attention(q, k, v, 4, "BSH", scale=0.25)[0]
        q, k, v = (z.view(2, 16, 4, 16).transpose(1, 2) for z in (q, k, v))
        p = torch.softmax(q @ k.transpose(-2, -1) * 0.25, dim=-1)
        return (p @ v).transpose(1, 2).reshape(2, 16, 64)


def test_recost_is_the_kernel_npu_fusion_attention_launches() -> None:
    """The re-cost of the explicit attention equals the FlashAttentionScore and
    FlashAttentionScoreGrad kernels the shim launches for the same call."""

    def build(fused: bool):
        return lambda: (Attend(fused), torch.randn(2, 16, 64), lambda m, x: m(x).sum())

    explicit = record(build(False), steps=1)
    fused = record(build(True), steps=1)
    costs = recost.attention(explicit)
    assert len(costs) == 1
    tasks = fused.tasks
    flash = tasks[tasks["op_type"].isin(["FlashAttentionScore", "FlashAttentionScoreGrad"])]
    assert len(flash) == 2
    assert costs["fused_ns"].iat[0] == pytest.approx(flash["duration_ns"].sum(), abs=1)
    assert attention.find(fused).matches.empty  # the fused form is no attention to fuse
    assert math.isclose(
        costs["saved_ns"].iat[0], costs["device_ns"].iat[0] - flash["duration_ns"].sum(), abs_tol=1
    )


def test_the_api_the_finding_names_takes_its_arguments() -> None:
    """The finding's ``apis`` (torch_npu.npu_fusion_attention with its keyword arguments)
    run on the npu device as one FlashAttentionScore kernel."""
    data = record(mha, steps=1)
    f = finding(data)
    (api,) = f.evidence["apis"]
    module, name = api["api"].rsplit(".", 1)
    fn = getattr(__import__(module), name)
    q, k, v = (torch.randn(2, 12, 4, 8, device="npu") for _ in range(3))  # BSND
    import msprof_py

    with msprof_py.record() as rec:
        out = fn(q, k, v, 4, **api["kwargs"])[0]
    assert out.shape == q.shape
    tasks = rec.load().tasks
    assert tasks["op_type"].tolist().count("FlashAttentionScore") == 1
    assert api["kwargs"]["scale"] == pytest.approx(1 / math.sqrt(8))
