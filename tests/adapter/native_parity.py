"""Record one training program that exercises many kinds of op, and print its fingerprint.

``python native_parity.py OUT`` records into ``OUT`` and prints one JSON line: which per-op
path ran (``msprof_py.adapter.native.status()``), the losses, a digest of the final
parameters and the profile's fingerprint (table digests, row counts, gate figures) and the
host ops' names with their counts. ``python native_parity.py OUT python`` sends every op down
the Python path although the compiled one is built: the two lines must agree but for the path.
Without a build (``MSPROF_NATIVE=0``) storages keep their state as Python objects, which torch
counts as holders: autograd then adds gradients that meet out of place (``aten::add``) where
the compiled build adds them in place (``aten::add_``), as CPU eager and torch_npu do.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "damaged"))

from fingerprint import fingerprint

import msprof_py


class Net(nn.Module):
    """A small CNN and a transformer layer side by side."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2)
        )
        self.embed = nn.Embedding(32, 16)
        self.block = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.1, batch_first=True)
        self.head = nn.Linear(8 * 4 * 4 + 16, 5)

    def forward(self, image: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        seen = self.conv(image).flatten(1)
        words = self.block(self.embed(tokens))
        pooled = torch.stack([words.mean(1), words.amax(1)]).mean(0)
        return self.head(torch.cat([seen, pooled], dim=1))


def main(out: Path, python_path: bool) -> None:
    from msprof_py.adapter import native, runtime

    torch.manual_seed(0)
    losses = []
    with msprof_py.record(out) as rec:
        if python_path:  # every op on the Python path (what bench_adapter's python_path does)
            assert runtime.STATE is not None
            runtime.STATE.native = False
        model = Net().to("npu")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        scaler = torch.npu.amp.GradScaler()
        image = torch.randn(4, 3, 8, 8).to("npu")
        tokens = torch.randint(0, 32, (4, 6)).to("npu")
        target = torch.randint(0, 5, (4,)).to("npu")
        for step in range(3):
            with torch.autocast("npu", dtype=torch.float16, enabled=step > 0):
                logits = model(image, tokens)
                loss = nn.functional.cross_entropy(logits, target)
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            values, order = torch.sort(logits.detach().float(), dim=1)
            top = torch.max(values, dim=1).values + order[:, 0] % 7 - (values * 0.5).sum() + 1
            losses.append([loss.item(), top.sum().item()])
    params = torch.cat([p.detach().cpu().flatten().float() for p in model.parameters()])
    print(
        json.dumps(
            {
                "path": native.status(),
                "losses": losses,
                "params": hashlib.sha256(params.numpy().tobytes()).hexdigest(),
                "profile": fingerprint(Path(rec.run_dir)),
                "host_ops": _host_op_counts(Path(rec.run_dir)),
            },
            sort_keys=True,
        )
    )


def _host_op_counts(run_dir: Path) -> dict[str, int]:
    names = msprof_py.load(run_dir).tables["host_events"]["name"]
    return {str(name): int(count) for name, count in names.value_counts().items()}


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:] == ["python"])
