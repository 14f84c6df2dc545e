"""INT8 vs fp16 inference of a small transformer on the simulated ascend910b.

    python sample_runs/int8_inference.py            # batch 1 / 8 / 64, seq 128
    python sample_runs/int8_inference.py --quick    # batch 1 / 16, seq 32, 2 layers, d 256

The model (written here): token embedding, ``layers`` pre-norm encoder blocks (qkv and output
projections, a 4x GELU MLP, all ``nn.Linear``; attention as two batched matmuls and a softmax),
a final LayerNorm and an LM head, in fp16 on the npu. The int8 model is the same weights after
``msprof_py.quant.quantize`` (min/max calibration on 4 batches) and ``convert``: every Linear
becomes ``Int8Linear`` (per-channel symmetric int8 weights on the device, the activation
quantised per tensor by an ``AscendQuant`` vector kernel, ``npu_quant_matmul`` on the cube with
int32 accumulation, fp16 output). Attention, LayerNorm, GELU and softmax stay fp16.

Figures per batch size, all from the simulator's virtual clock [modelled]: latency = host time
from the call to the end of ``torch.npu.synchronize()`` (dispatch included); throughput =
tokens / latency; weights = device bytes after loading; peak = the forward's device memory peak;
error = max |int8 - fp16| over max |fp16| of the logits on a held-out batch (measured on real
values). Assumptions: one device, eager mode (one launch per op), the cost model's int8 cube
rate (twice fp16: the int8 fractal 16x32x16), no L2 reuse between kernels. Small batches are
launch- and memory-bound, so int8 gains little there (the extra quantise kernels even cost
time); the gain grows with the GEMMs, as on hardware.
"""

from __future__ import annotations

import argparse
import copy
import math
import sys

import torch
import torch.nn.functional as F
from torch import nn

import msprof_py.adapter
from msprof_py import quant


class Block(nn.Module):
    """A pre-norm transformer encoder block with plain Linear layers."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q, k, v = (t.reshape(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d // self.heads)
        att = torch.matmul(scores.softmax(dim=-1), v).transpose(1, 2).reshape(b, s, d)
        x = x + self.proj(att)
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class TinyLM(nn.Module):
    """Embedding, ``layers`` blocks, LayerNorm and an LM head."""

    def __init__(self, vocab: int, d: int, heads: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.Sequential(*(Block(d, heads) for _ in range(layers)))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.blocks(self.embed(tokens))))


def measure(npu, model: nn.Module, tokens: torch.Tensor, repeats: int = 2) -> dict:
    """Latency (us, the last of ``repeats`` runs), throughput and the forward's memory peak."""
    with torch.no_grad():
        model(tokens)  # warm-up: allocator growth
        torch.npu.synchronize()
        torch.npu.reset_peak_memory_stats()
        before = torch.npu.memory_allocated()
        for _ in range(repeats):
            start = npu.engine.host_ns
            out = model(tokens)
            torch.npu.synchronize()
            latency = npu.engine.host_ns - start
    return {
        "latency_us": latency / 1e3,
        "tokens_per_s": tokens.numel() / (latency * 1e-9),
        "peak_bytes": torch.npu.max_memory_allocated() - before,
        "out": out.float().cpu(),
    }


def run(batches: list[int], seq: int, layers: int, d: int = 512, vocab: int = 8000) -> list:
    """One row per batch size: fp16 and int8 figures and the measured output error."""
    npu = msprof_py.adapter.install()
    torch.manual_seed(0)
    assert torch.npu.memory_allocated() == 0, "run in a fresh process"
    fp16 = TinyLM(vocab, d, 8, layers).half().eval().to("npu")
    torch.npu.synchronize()
    fp16_weights = torch.npu.memory_allocated()
    int8 = copy.deepcopy(fp16)
    gen = torch.Generator().manual_seed(1)

    def batch(n: int) -> torch.Tensor:
        return torch.randint(0, vocab, (n, seq), generator=gen).to("npu")

    calibration = quant.quantize(int8, [batch(4) for _ in range(4)])
    report = quant.convert(int8, calibration)  # the float Linear weights are freed
    torch.npu.synchronize()
    int8_weights = torch.npu.memory_allocated() - fp16_weights
    rows = []
    for n in batches:
        tokens = batch(n)
        a, b = measure(npu, fp16, tokens), measure(npu, int8, tokens)
        err = float((a["out"] - b["out"]).abs().max() / a["out"].abs().max())
        rows.append({"batch": n, "fp16": a, "int8": b, "error": err})
    return [rows, fp16_weights, int8_weights, report]


def main(argv: list[str] | None = None) -> int:
    """Print the fp16 vs int8 table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="batch 1 / 16, seq 32, 2 layers, d 256")
    args = ap.parse_args(argv)
    if args.quick:
        batches, seq, layers, d, vocab = [1, 16], 32, 2, 256, 2000
    else:
        batches, seq, layers, d, vocab = [1, 8, 64], 128, 4, 512, 8000
    rows, w16, w8, report = run(batches, seq, layers, d, vocab)
    print(f"ascend910b, TinyLM d={d} 8 heads {layers} layers vocab {vocab}, seq {seq} [modelled]")
    print(f"weights on the device: fp16 {w16 / 2**20:.1f} MiB, int8 {w8 / 2**20:.1f} MiB")
    print(f"calibration: {report}")
    head = (
        f"{'batch':>5} | {'fp16 us':>9} {'int8 us':>9} {'speed-up':>8} | {'fp16 tok/s':>11} "
        f"{'int8 tok/s':>11} | {'fp16 peak MiB':>13} {'int8 peak MiB':>13} | {'rel err':>7}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        a, b = r["fp16"], r["int8"]
        print(
            f"{r['batch']:>5} | {a['latency_us']:>9,.1f} {b['latency_us']:>9,.1f} "
            f"{a['latency_us'] / b['latency_us']:>7.2f}x | {a['tokens_per_s']:>11,.0f} "
            f"{b['tokens_per_s']:>11,.0f} | {a['peak_bytes'] / 2**20:>13.2f} "
            f"{b['peak_bytes'] / 2**20:>13.2f} | {r['error']:>7.2%}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
