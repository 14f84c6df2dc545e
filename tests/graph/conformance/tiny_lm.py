"""A one-block causal language model written here (GPT-2's structure, no library code)."""

from __future__ import annotations

import torch
from torch import nn


class TinyCausalLM(nn.Module):
    """Token and position embeddings, one pre-LN block (causal self-attention with a padding
    mask, GELU MLP), final layer norm and an LM head tied to the token embedding; returns the
    shifted next-token cross-entropy."""

    def __init__(self, vocab: int = 64, width: int = 16, heads: int = 2, positions: int = 16):
        super().__init__()
        self.heads = heads
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(positions, width)
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, s = ids.shape
        x = self.tok(ids) + self.pos(torch.arange(s, device=ids.device))
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
        causal = torch.ones(s, s, dtype=torch.bool, device=ids.device).tril()
        allowed = causal & mask[:, None, None, :].bool()
        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
        ctx = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, -1)
        x = x + self.proj(ctx)
        x = x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))
        logits = self.head(self.ln_f(x))
        return nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1)
        )
