"""Hugging Face transformers models, built from small configs, train on npu exactly as on CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
import torch
from model_helpers import compare_training
from optional import LazyModule, needs
from raw_tables import read_raw_tables
from torch import nn

from msprof_py.adapter import native
from msprof_py.device import SimulatedNpu
from msprof_py.profile.schema import RAW_DIR

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


@pytest.mark.skipif(native.load() is None, reason=native.status())
@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_save_pretrained_on_the_npu_loads_back_the_same_weights(
    npu: SimulatedNpu, name: str, tmp_path: Path
) -> None:
    """``save_pretrained`` tells storages apart by ``data_ptr()`` and ``nbytes()`` (its check
    for tied weights): a model trained a step on the npu saves (safetensors) and loads back on
    the CPU with the same weights, gpt2's tied head included."""
    build, batches = MODELS[name]
    torch.manual_seed(0)
    model = build("eager").to("npu")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    _hf_loss(model, {k: v.to("npu") for k, v in batches()[0].items()}).backward()
    optimizer.step()
    model.save_pretrained(tmp_path)
    loaded = type(model).from_pretrained(tmp_path).state_dict()
    saved = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    assert saved.keys() == loaded.keys()
    assert [k for k in saved if not torch.equal(saved[k], loaded[k])] == []


_RECORDED_BERT = """
import json, sys
from pathlib import Path
import torch
sys.path.insert(0, sys.argv[2])
import torchvision_guard
torchvision_guard.guard()
import msprof_py
from msprof_py.adapter import native
from msprof_py.collectors.session import SessionConfig, start_session
session = start_session(SessionConfig(output=sys.argv[1], export=False, deterministic=True))
if sys.argv[3:] == ["python"]:  # the Python path for every op
    from msprof_py.adapter import runtime
    runtime.STATE.native = False
import transformers
torch.manual_seed(0)
config = transformers.BertConfig(vocab_size=96, hidden_size=32, num_hidden_layers=2,
    num_attention_heads=2, intermediate_size=64, max_position_embeddings=32)
model = transformers.BertForSequenceClassification(config).to("npu")
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
ids = torch.randint(1, 96, (2, 12)).to("npu")
labels = torch.tensor([0, 1]).to("npu")
for _ in range(3):
    loss = model(input_ids=ids, labels=labels).loss
    loss.backward()
    opt.step()
    opt.zero_grad()
    loss.item()
    msprof_py.step()
print(json.dumps({"run": str(session.stop()), "path": native.status()}))
"""


def _recorded_bert(out: Path, *args: str) -> tuple[str, dict[str, pa.Table]]:
    proc = subprocess.run(
        [sys.executable, "-c", _RECORDED_BERT, str(out), str(Path(__file__).parent), *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    tables = read_raw_tables(Path(result["run"]) / RAW_DIR)
    return result["path"], tables


def test_a_recorded_bert_step_is_the_same_profile_on_the_compiled_and_python_paths(
    tmp_path: Path,
) -> None:
    """The compiled npu kernel runs views and plain ops and writes their host-op rows itself:
    a recorded BERT fine-tuning step gives every table (tasks, host ops with their module
    paths and autograd sequence numbers, memory, steps) exactly as every op sent down the
    Python path does (the build loaded: without it storages keep their state as Python
    objects, and autograd adds gradients that meet out of place; tests/adapter/test_native.py
    checks that run)."""
    compiled_path, compiled = _recorded_bert(tmp_path / "compiled")
    python_path, python = _recorded_bert(tmp_path / "python", "python")
    assert compiled_path == python_path  # the build's status, or why it is missing
    if native.load() is not None:
        assert compiled_path.startswith("compiled")
    assert compiled.keys() == python.keys() and {"tasks", "host_events"} <= compiled.keys()
    assert compiled["host_events"].num_rows > 500
    assert any(compiled["host_events"].column("module_path").to_pylist())
    for name in compiled:
        assert compiled[name].equals(python[name]), name
