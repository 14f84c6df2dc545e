"""Hugging Face transformers models, built from small configs, train on npu exactly as on CPU."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from model_helpers import compare_training
from optional import LazyModule, needs
from torch import nn

from msprof_py.device import SimulatedNpu

pytestmark = needs("transformers")
transformers = LazyModule("transformers")

VOCAB = 96
SEQ = 12
BATCH = 2
ATTENTION = ["eager", "sdpa"]


def _tokens(seed: int) -> torch.Tensor:
    return torch.randint(1, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(seed))


def _lm_batches() -> list[dict[str, torch.Tensor]]:
    out = []
    for step in range(3):
        ids = _tokens(step)
        mask = torch.ones_like(ids)
        mask[1, -3:] = 0  # padding in the second sequence
        out.append({"input_ids": ids, "attention_mask": mask, "labels": ids})
    return out


def _seq2seq_batches() -> list[dict[str, torch.Tensor]]:
    return [
        {"input_ids": _tokens(step), "labels": _tokens(step + 10)[:, : SEQ - 4].contiguous()}
        for step in range(3)
    ]


def _image_batches() -> list[dict[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    return [
        {
            "pixel_values": torch.randn(BATCH, 3, 32, 32, generator=gen),
            "labels": torch.randint(0, 5, (BATCH,), generator=gen),
        }
        for _ in range(3)
    ]


def _hf_loss(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return model(**batch).loss


_SMALL = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


def _gpt2(attn: str) -> nn.Module:
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=4,
        bos_token_id=1, eos_token_id=2,
    )  # fmt: skip
    config._attn_implementation = attn
    return transformers.GPT2LMHeadModel(config)


def _bert(attn: str) -> nn.Module:
    config = transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=32,
    )  # fmt: skip
    config._attn_implementation = attn
    return transformers.BertForMaskedLM(config)


def _llama(attn: str) -> nn.Module:
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
        bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )  # fmt: skip
    config._attn_implementation = attn
    return transformers.LlamaForCausalLM(config)


def _t5(attn: str) -> nn.Module:
    config = transformers.T5Config(
        vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
        decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
    )  # fmt: skip
    config._attn_implementation = attn
    return transformers.T5ForConditionalGeneration(config)


def _bart(attn: str) -> nn.Module:
    config = transformers.BartConfig(
        vocab_size=VOCAB, d_model=32, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_position_embeddings=32, pad_token_id=0, bos_token_id=1,
        eos_token_id=2, decoder_start_token_id=2,
    )  # fmt: skip
    config._attn_implementation = attn
    return transformers.BartForConditionalGeneration(config)


def _vit(attn: str) -> nn.Module:
    config = transformers.ViTConfig(
        image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, num_labels=5,
    )  # fmt: skip
    config._attn_implementation = attn
    return transformers.ViTForImageClassification(config)


MODELS: dict[str, tuple[Callable[[str], nn.Module], Callable[[], list]]] = {
    "gpt2": (_gpt2, _lm_batches),
    "bert": (_bert, _lm_batches),
    "llama": (_llama, _lm_batches),
    "t5": (_t5, _seq2seq_batches),
    "bart": (_bart, _seq2seq_batches),
    "vit": (_vit, _image_batches),
}


@pytest.mark.parametrize("attn", ATTENTION)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_trains_bitwise_like_cpu(npu: SimulatedNpu, name: str, attn: str) -> None:
    build, batches = MODELS[name]
    result = compare_training(lambda: build(attn), batches(), _hf_loss)
    assert result.problems() == []


@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_fused_optimizer_trains_bitwise_like_cpu(npu: SimulatedNpu, name: str) -> None:
    build, batches = MODELS[name]
    result = compare_training(lambda: build("eager"), batches(), _hf_loss, "adamw-fused")
    assert result.problems() == []


def test_tied_models_keep_their_ties(npu: SimulatedNpu) -> None:
    model = _gpt2("eager").to("npu")
    assert model.lm_head.weight is model.transformer.wte.weight
