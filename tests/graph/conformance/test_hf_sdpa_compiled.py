"""Hugging Face GPT-2 and BERT (tiny configs, SDPA attention, bf16) with a padding mask,
compiled with ``backend="npu"`` on the 910B preset: every layer's attention is ONE
FlashAttentionScore node (its gradient one FlashAttentionScoreGrad) with the padding mask as
atten_mask and the attention dropout as keep_prob, and the training step is bitwise eager
CPU's (loss and every gradient; the dropout draws the same numbers). Dynamo traces a model in
10-20 s: slow."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from torch import nn

from msprof_py.device import SimulatedNpu
from msprof_py.graph.passes.sdpa import SDPA_GRAD_PASS, SDPA_PASS
from msprof_py.graph.runner import compiled_graphs

VOCAB, SEQ, BATCH, LAYERS = 64, 8, 2, 2


def _gpt2() -> nn.Module:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=16, n_embd=32, n_layer=LAYERS, n_head=2,
        bos_token_id=1, eos_token_id=2, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.1,
    )  # fmt: skip
    config._attn_implementation = "sdpa"
    return transformers.GPT2LMHeadModel(config).to(torch.bfloat16)


def _bert() -> nn.Module:
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=LAYERS, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=16,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.1,
    )  # fmt: skip
    config._attn_implementation = "sdpa"
    return transformers.BertForMaskedLM(config).to(torch.bfloat16)


def _batch() -> dict[str, torch.Tensor]:
    ids = torch.randint(1, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, -3:] = 0  # the second sequence ends in padding
    return {"input_ids": ids, "attention_mask": mask, "labels": ids}


def _step(model: nn.Module, device: str, compiled: bool) -> tuple[torch.Tensor, dict]:
    model = copy.deepcopy(model).to(device).train()
    run = torch.compile(model, backend="npu") if compiled else model
    torch.manual_seed(7)  # the attention dropout's draws
    loss = run(**{k: v.to(device) for k, v in _batch().items()}).loss
    loss.backward()
    grads = {n: p.grad.detach().cpu() for n, p in model.named_parameters() if p.grad is not None}
    return loss.detach().cpu(), grads


@pytest.mark.slow
@pytest.mark.parametrize("build", [_gpt2, _bert], ids=["gpt2", "bert"])
def test_hf_model_with_padding_mask_gets_flash_attention_nodes(
    npu: SimulatedNpu, build: Callable[[], nn.Module]
) -> None:
    torch.manual_seed(0)
    model = build()
    earlier = compiled_graphs()  # the other parameters' graphs (held: their ids stay theirs)
    cpu_loss, cpu_grads = _step(model, "cpu", compiled=False)
    npu_loss, npu_grads = _step(model, "npu", compiled=True)
    assert torch.equal(cpu_loss, npu_loss), (cpu_loss, npu_loss)
    assert cpu_grads.keys() == npu_grads.keys()
    for name, grad in cpu_grads.items():
        assert torch.equal(grad, npu_grads[name]), name
    seen = {id(g) for g in earlier}
    graphs = [g for g in compiled_graphs() if id(g) not in seen and g.last_plan is not None]
    forward = [
        k.op_type for g in graphs if g.name.endswith("_forward") for k in g.last_plan.kernels
    ]
    backward = [
        k.op_type for g in graphs if g.name.endswith("_backward") for k in g.last_plan.kernels
    ]
    assert forward.count("FlashAttentionScore") == LAYERS
    assert forward.count("DropOutGenMaskV3") == LAYERS  # attn_pdrop in training
    assert backward.count("FlashAttentionScoreGrad") == LAYERS
    assert "SoftmaxV2" not in forward and "SoftmaxGrad" not in backward
    records = [r for g in graphs for r in g.last_plan.records]
    hits = [r for r in records if r.pass_name == SDPA_PASS and r.hit]
    assert len(hits) == LAYERS
    assert all(f"atten_mask=[{BATCH}, 1, {SEQ}, {SEQ}] bool" in r.reason for r in hits)
    assert all("keep_prob=0.9" in r.reason for r in hits)
    assert not [r for r in records if r.pass_name == SDPA_PASS and not r.hit]
    assert len([r for r in records if r.pass_name == SDPA_GRAD_PASS and r.hit]) == LAYERS
