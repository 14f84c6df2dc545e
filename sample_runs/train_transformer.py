"""Train a small transformer language model on synthetic tokens on the (simulated) Ascend NPU.

Written the way training scripts for Ascend devices are written (``device = "npu"``,
``model.to(device)``, ``torch.npu.synchronize()``), with the layers spelled out: token and
positional embeddings, pre-norm encoder blocks whose multi-head self-attention is written with
matmuls and a softmax (causal mask), a GELU MLP, residual adds, a final LayerNorm and an output
projection, trained with AdamW and cross-entropy on next-token prediction. Each step is timed
with ``torch.npu.Event`` pairs, so the step time printed is simulated device time.

The synthetic sequences follow a fixed rule (each token is the previous one plus one, modulo
the vocabulary, from a random start), so the loss falls quickly.

``--attention fused`` runs the attention as ``torch_npu.npu_fusion_attention`` (one
FlashAttention kernel) instead: what ``msprof analyze`` recommends for the explicit form.
``--attention dsl`` runs it as the FlashAttention kernel written in the kernel DSL
(``flash_attention_kernel.py``, registered with ``torch.library``; fp16 inside the op, causal;
its device task is timed by the kernel's pipe simulation; sequence length a multiple of 128,
head dim a multiple of 16, no dropout).

    python sample_runs/train_transformer.py [--steps 5] [--batch-size 8] [--seq-len 64]
        [--attention math|fused|dsl]
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

if not hasattr(torch, "npu"):  # a launcher may have installed the device already
    import msprof_py.adapter

    msprof_py.adapter.install()


@dataclass(frozen=True)
class Config:
    """Model sizes."""

    vocab_size: int = 256
    seq_len: int = 64
    d_model: int = 128
    n_heads: int = 4
    n_layers: int = 2
    mlp_ratio: int = 4
    dropout: float = 0.0
    #: "math" (matmuls and a softmax), "fused" (torch_npu.npu_fusion_attention) or "dsl"
    #: (the kernel DSL's FlashAttention, ``flash_attention_kernel.py``)
    attention: str = "math"


@functools.cache
def dsl_flash_attention():  # type: ignore[no-untyped-def]
    """The causal FlashAttention DSL kernel as a torch op ``(q, kt, v, mask) -> out``
    (registered once per process)."""
    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)
    import flash_attention_kernel

    return flash_attention_kernel.register_flash_attention(
        "msprof_samples::flash_attention_causal", causal=True
    )


class SelfAttention(nn.Module):
    """Causal multi-head self-attention from explicit matmuls and a softmax."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.head_dim = cfg.d_model // cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.dropout = nn.Dropout(cfg.dropout)
        self.fused = cfg.attention == "fused"
        self.dsl = cfg.attention == "dsl"
        if self.dsl and (cfg.seq_len % 128 or self.head_dim % 16 or cfg.dropout):
            raise ValueError(
                "--attention dsl needs a sequence length that is a multiple of 128, a head dim "
                f"that is a multiple of 16 and no dropout (got {cfg.seq_len}, {self.head_dim}, "
                f"{cfg.dropout})"
            )
        mask = torch.triu(torch.ones(cfg.seq_len, cfg.seq_len, dtype=torch.bool), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        if self.fused:
            return self.proj(self._fused(q, k, v))
        if self.dsl:
            return self.proj(self._dsl(q, k, v))
        q = q.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k = k.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        v = v.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(self.mask[:t, :t], float("-inf"))
        weights = self.dropout(torch.softmax(scores, dim=-1))
        out = torch.matmul(weights, v).transpose(1, 2).reshape(b, t, c)
        return self.proj(out)

    def _fused(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """The same attention as one FlashAttention kernel, on [b, t, c] ("BSH") inputs."""
        t = q.shape[1]
        mask, scale = self.mask[:t, :t], 1.0 / math.sqrt(self.head_dim)
        p = self.dropout.p if self.training else 0.0
        if q.device.type != "npu":  # SDPA's boolean mask keeps True
            heads = (
                z.unflatten(-1, (self.n_heads, self.head_dim)).transpose(1, 2) for z in (q, k, v)
            )
            out = F.scaled_dot_product_attention(*heads, attn_mask=~mask, dropout_p=p, scale=scale)
            return out.transpose(1, 2).flatten(2)
        import torch_npu

        return torch_npu.npu_fusion_attention(
            q, k, v, self.n_heads, "BSH", atten_mask=mask, scale=scale, keep_prob=1.0 - p
        )[0]

    def _dsl(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """The same attention as the DSL FlashAttention kernel (fp16 inside, causal)."""
        b, t, c = q.shape
        q, k, v = (
            z.view(b, t, self.n_heads, self.head_dim).transpose(1, 2).half() for z in (q, k, v)
        )
        mask = torch.zeros(b, t, device=q.device)  # additive key-padding mask: none padded
        out = dsl_flash_attention()(
            q.contiguous(), k.transpose(-1, -2).contiguous(), v.contiguous(), mask
        )
        return out.to(self.proj.weight.dtype).transpose(1, 2).reshape(b, t, c)


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = SelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.fc1 = nn.Linear(cfg.d_model, cfg.mlp_ratio * cfg.d_model)
        self.fc2 = nn.Linear(cfg.mlp_ratio * cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TinyLM(nn.Module):
    """Embeddings, ``n_layers`` blocks, final LayerNorm, vocabulary projection."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok_emb(tokens) + self.pos_emb(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def synthetic_tokens(
    batch_size: int, cfg: Config, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and next-token targets (on the CPU): ``(start + i) % vocab`` sequences."""
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, cfg.vocab_size, (batch_size, 1), generator=g)
    seq = (start + torch.arange(cfg.seq_len + 1)) % cfg.vocab_size
    return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()


def build(cfg: Config | None = None, seed: int = 0) -> TinyLM:
    """The model with deterministic initial weights (on the CPU)."""
    torch.manual_seed(seed)
    return TinyLM(cfg or Config())


@dataclass
class TrainResult:
    """Per-step losses and step times of one run."""

    device: str
    losses: list[float] = field(default_factory=list)
    #: simulated ms per step on npu (torch.npu.Event), real ms on other devices
    step_ms: list[float] = field(default_factory=list)

    @property
    def mean_step_ms(self) -> float:
        """Mean step time, leaving the first step (warm-up) out when there are several."""
        times = self.step_ms[1:] if len(self.step_ms) > 1 else self.step_ms
        return sum(times) / len(times) if times else 0.0


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    tokens: torch.Tensor,
    targets: torch.Tensor,
) -> torch.Tensor:
    """One forward, backward and optimizer step; returns the loss (on the model's device)."""
    optimizer.zero_grad(set_to_none=True)
    logits = model(tokens)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss


def train(
    steps: int = 5,
    batch_size: int = 8,
    device: str = "npu",
    *,
    cfg: Config | None = None,
    lr: float = 3e-3,
    seed: int = 0,
    verbose: bool = True,
) -> TrainResult:
    """Train for ``steps`` steps on ``device`` and return the losses and step times."""
    cfg = cfg or Config()
    device_type = torch.device(device).type
    on_npu = device_type == "npu"
    model = build(cfg, seed).to(device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    tokens, targets = synthetic_tokens(batch_size, cfg, seed)
    tokens, targets = tokens.to(device), targets.to(device)

    result = TrainResult(device=device_type)
    if on_npu:
        torch.npu.synchronize()
    for step in range(steps):
        if on_npu:
            start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
            start.record()
        else:
            t0 = time.perf_counter()
        loss = train_step(model, optimizer, tokens, targets)
        if on_npu:
            end.record()
            torch.npu.synchronize()
            elapsed = start.elapsed_time(end)
        else:
            elapsed = (time.perf_counter() - t0) * 1e3
        result.losses.append(loss.item())
        result.step_ms.append(elapsed)
        if verbose:
            print(f"step {step + 1}/{steps}  loss {result.losses[-1]:.4f}  {elapsed:.3f} ms")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--device", default="npu", help="npu (default) or cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--attention", choices=("math", "fused", "dsl"), default="math",
        help="math: matmuls and a softmax (default); fused: torch_npu.npu_fusion_attention; "
        "dsl: the kernel DSL's FlashAttention (seq len a multiple of 128)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    cfg = Config(
        seq_len=args.seq_len, d_model=args.d_model, n_layers=args.layers, attention=args.attention
    )
    print(
        f"TinyLM on {args.device}: batch {args.batch_size} x seq {cfg.seq_len}, "
        f"d_model {cfg.d_model}, {cfg.n_layers} layers, {args.steps} steps"
    )
    result = train(args.steps, args.batch_size, args.device, cfg=cfg, seed=args.seed)
    kind = "simulated" if result.device == "npu" else "measured"
    print(f"mean step time ({kind}): {result.mean_step_ms:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
