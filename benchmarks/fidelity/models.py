"""ResNet-50 v1.5 and BERT-Large, written for the fidelity benchmark.

Own definitions (no torchvision), shaped as the published benchmarks run them: ResNet-50 v1.5
(the graph-mode sample's model) puts the stride-2 of each downsampling bottleneck on the 3x3
convolution; BERT-Large has 24
layers, hidden 1024, 16 heads, FFN 4096, vocab 30,522 and the two pre-training heads.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sample_runs"))

from resnet50_graph import ResNet


class ResNet50(ResNet):
    """ResNet-50 v1.5 for 224 x 224 ImageNet (1,000 classes): the graph-mode sample's ResNet
    (``sample_runs/resnet50_graph.py``) at its defaults."""


class BertLayer(nn.Module):
    """One post-LN transformer encoder layer (self-attention + GELU FFN)."""

    def __init__(self, hidden: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln1 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, ffn)
        self.fc2 = nn.Linear(ffn, hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        scores = torch.matmul(q, k.transpose(-1, -2)) / (h // self.heads) ** 0.5
        ctx = torch.matmul(self.drop(torch.softmax(scores, dim=-1)), v)
        ctx = ctx.transpose(1, 2).reshape(b, s, h)
        x = self.ln1(x + self.drop(self.proj(ctx)))
        y = self.fc2(self.drop(torch.nn.functional.gelu(self.fc1(x))))
        return self.ln2(x + self.drop(y))


class BertLarge(nn.Module):
    """BERT-Large with the masked-LM (tied decoder) and next-sentence heads."""

    def __init__(
        self, vocab: int = 30522, hidden: int = 1024, layers: int = 24, heads: int = 16
    ) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, hidden)
        self.pos = nn.Embedding(512, hidden)
        self.typ = nn.Embedding(2, hidden)
        self.ln = nn.LayerNorm(hidden)
        self.layers = nn.ModuleList(BertLayer(hidden, heads, 4 * hidden) for _ in range(layers))
        self.mlm_dense = nn.Linear(hidden, hidden)
        self.mlm_ln = nn.LayerNorm(hidden)
        self.mlm_bias = nn.Parameter(torch.zeros(vocab))
        self.pooler = nn.Linear(hidden, hidden)
        self.nsp = nn.Linear(hidden, 2)

    def forward(
        self,
        ids: torch.Tensor,
        types: torch.Tensor,
        positions: torch.Tensor,
        masked: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Masked-LM logits at the ``masked`` positions (``[batch, predictions]`` indices, as
        BERT pre-training gathers them) and next-sentence logits."""
        x = self.ln(self.tok(ids) + self.pos(positions) + self.typ(types))
        for layer in self.layers:
            x = layer(x)
        index = masked.unsqueeze(-1).expand(-1, -1, x.shape[-1])
        picked = torch.gather(x, 1, index)
        h = self.mlm_ln(torch.nn.functional.gelu(self.mlm_dense(picked)))
        logits = torch.matmul(h, self.tok.weight.t()) + self.mlm_bias
        nsp = self.nsp(torch.tanh(self.pooler(x[:, 0])))
        return logits, nsp
