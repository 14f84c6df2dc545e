"""A LLaMA-style decoder trained with torch_npu's fused ops on the (simulated) Ascend NPU.

Written like scripts for Ascend hardware: ``import torch_npu``, RMSNorm with
``torch_npu.npu_rms_norm``, rotary embeddings with ``torch_npu.npu_rotary_mul``, attention with
``torch_npu.npu_fusion_attention`` (FlashAttention: one fused kernel, no score matrix in device
memory), a SwiGLU MLP with ``torch_npu.npu_swiglu``, and ``torch_npu.optim.NpuFusedAdamW``; bf16
weights and activations.

    python sample_runs/train_torch_npu.py [--steps 5]
"""

from __future__ import annotations

import argparse
import math
import sys

import torch

if not hasattr(torch, "npu"):  # a launcher may have installed the device already
    import msprof_py.adapter

    msprof_py.adapter.install()

import torch.nn as nn
import torch.nn.functional as F
import torch_npu


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch_npu.npu_rms_norm(x, self.weight, epsilon=self.eps)[0]


class DecoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.attn_norm, self.mlp_norm = RMSNorm(dim), RMSNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)
        self.gate_up = nn.Linear(dim, 2 * hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).view(b, s, 3, self.heads, self.head_dim).unbind(2)
        q = torch_npu.npu_rotary_mul(q, cos, sin)
        k = torch_npu.npu_rotary_mul(k, cos, sin)
        attn = torch_npu.npu_fusion_attention(
            q, k, v, self.heads, "BSND", atten_mask=mask, scale=1 / math.sqrt(self.head_dim)
        )[0]
        x = x + self.out(attn.reshape(b, s, d))
        return x + self.down(torch_npu.npu_swiglu(self.gate_up(self.mlp_norm(x)), dim=-1))


class TinyLlama(nn.Module):
    def __init__(
        self,
        vocab: int = 1024,
        dim: int = 256,
        heads: int = 4,
        layers: int = 2,
        hidden: int = 512,
        seq: int = 128,
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(DecoderLayer(dim, heads, hidden) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        head_dim = dim // heads
        angles = torch.outer(torch.arange(seq), 1e4 ** (-torch.arange(0, head_dim, 2) / head_dim))
        angles = torch.cat([angles, angles], -1)[None, :, None, :]  # [1, S, 1, D]
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)
        causal = torch.triu(torch.ones(seq, seq, dtype=torch.bool), 1)  # True = masked
        self.register_buffer("mask", causal, persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, self.cos, self.sin, self.mask)
        return self.head(self.norm(x))


def train(steps: int = 5, batch_size: int = 8, seq: int = 128) -> list[float]:
    """Train next-token prediction on synthetic tokens; return the losses."""
    device = "npu"
    torch.manual_seed(0)
    model = TinyLlama(seq=seq).to(device, dtype=torch.bfloat16)
    model.mask = model.mask.to(torch.bool)
    optimizer = torch_npu.optim.NpuFusedAdamW(model.parameters(), lr=3e-3)
    data = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 1024, (batch_size, seq + 1), generator=data).to(device)
    losses = []
    for step in range(steps):
        start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
        start.record()
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        end.record()
        torch.npu.synchronize()
        losses.append(loss.item())
        print(f"step {step}: loss {losses[-1]:.4f}  {start.elapsed_time(end):.3f} ms (simulated)")
    return losses


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args(argv)
    train(args.steps, args.batch_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
