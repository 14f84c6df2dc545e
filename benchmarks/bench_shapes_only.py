"""Wall time of one shapes-only training step (``numerics="none"``) of the fidelity models.

Shapes-only mode exists for models too big for host memory; a step must stay quick for it to
be usable (issue 14: ResNet-50 bs256 under 1 s per step; issue 20: BERT-Large bs96 under 1 s
too). Each model runs ``--steps`` fp16 AMP steps (GradScaler; SGD momentum for ResNet-50,
foreach AdamW for BERT-Large) on the ``--device`` preset in a fresh process, and the wall time
of every step is printed with the split into forward, backward and optimizer; step 0 includes
the allocator's and caches' first use, and the first steps pay the modelled online compiles
(simulated ms). Wall times depend on the machine and its load; the simulated ones do not.

    python benchmarks/bench_shapes_only.py [--device ascend910a] [--steps 4] [--model resnet50|bert]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _run_model(name: str, device: str, steps: int) -> list[dict[str, float]]:
    """One process's measurements (called in the child)."""
    import msprof_py.adapter

    npu = msprof_py.adapter.install(numerics="none", device=device)
    import torch
    from torch.nn import functional as F

    sys.path.insert(0, str(HERE))
    from fidelity.models import BertLarge, ResNet50

    torch.manual_seed(0)
    if name == "resnet50":
        model = ResNet50().to("npu")
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        x = torch.zeros(256, 3, 224, 224).to("npu")
        y = torch.zeros(256, dtype=torch.long).to("npu")

        def loss_fn() -> torch.Tensor:
            return F.cross_entropy(model(x), y)
    else:
        model = BertLarge().to("npu")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        bs, seq = 96, 128
        ids = torch.zeros(bs, seq, dtype=torch.long).to("npu")
        types = torch.zeros(bs, seq, dtype=torch.long).to("npu")
        positions = torch.arange(seq).expand(bs, seq).contiguous().to("npu")
        masked = torch.arange(20).expand(bs, 20).contiguous().to("npu")

        def loss_fn() -> torch.Tensor:
            mlm, nsp = model(ids, types, positions, masked)
            return mlm.float().mean() + nsp.float().mean()

    scaler = torch.amp.GradScaler("npu")
    rows = []
    for _ in range(steps):
        device_start = npu.engine.host_ns
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("npu", dtype=torch.float16):
            loss = loss_fn()
        t1 = time.perf_counter()
        scaler.scale(loss).backward()
        t2 = time.perf_counter()
        scaler.step(opt)
        scaler.update()
        torch.npu.synchronize()
        t3 = time.perf_counter()
        rows.append(
            {
                "wall_s": t3 - t0,
                "forward_s": t1 - t0,
                "backward_s": t2 - t1,
                "optimizer_s": t3 - t2,
                "simulated_ms": (npu.engine.host_ns - device_start) / 1e6,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="ascend910a", help="device preset")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--model", choices=["resnet50", "bert", "all"], default="all")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_run_model(args.child, args.device, args.steps)))
        return 0
    names = ["resnet50", "bert"] if args.model == "all" else [args.model]
    print("| model | step | wall s | forward s | backward s | optimizer s | simulated ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in names:
        out = subprocess.run(
            [sys.executable, __file__, "--child", name, "--device", args.device,
             "--steps", str(args.steps)],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        rows = json.loads(out.stdout.strip().splitlines()[-1])
        label = "ResNet-50 bs256" if name == "resnet50" else "BERT-Large bs96 seq128"
        for i, r in enumerate(rows):
            print(
                f"| {label} | {i} | {r['wall_s']:.2f} | {r['forward_s']:.2f} | "
                f"{r['backward_s']:.2f} | {r['optimizer_s']:.2f} | {r['simulated_ms']:,.1f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
