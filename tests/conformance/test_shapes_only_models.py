"""The conformance models train three steps in shapes-only mode (``numerics="none"``)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from optional import needs

pytestmark = needs("transformers", "timm")

SCRIPT = """
import json, sys
sys.path[:0] = [{here!r}, {tests!r}]  # the model tables, and tests/cuda_autocast.py they use
import torchvision_guard; torchvision_guard.guard()
import hashlib
import torch, msprof_py.adapter as ad
from msprof_py.adapter import backend
from msprof_py.device import TaskLog
npu = ad.install(numerics="none")
backend.META_RESULTS.enabled = sys.argv[1] == "on"
import timm, transformers
import torch.nn.functional as F
from test_hf_models import MODELS as HF
from test_timm_models import _build as timm_build, MODELS as TIMM

def timeline(tasks):  # a digest of each task's name, type, times and tensor shapes
    rows = [(t.name, t.op_type, t.start_ns, t.end_ns, t.input_shapes, t.output_shapes)
            for t in tasks]
    return hashlib.sha256(repr(rows).encode()).hexdigest()[:16]

def train(model, batch, loss_fn, make_opt):
    model = model.to("npu")
    opt = make_opt(model.parameters())
    for _ in range(3):
        opt.zero_grad()
        loss = loss_fn(model, {{k: v.to("npu") for k, v in batch.items()}})
        loss.backward()
        opt.step()
    return loss

results = {{}}
log = TaskLog()
npu.subscribe(log)
for name, (build, batches) in sorted(HF.items()):
    for attn in ("eager", "sdpa"):
        start = len(log.tasks)
        try:
            loss = train(build(attn), batches()[0], lambda m, b: m(**b).loss,
                         lambda p: torch.optim.AdamW(p, lr=1e-3))
            kernels = sum(t.kind.value == "kernel" for t in log.tasks[start:])
            results[name + "-" + attn] = ["ok", str(loss.device), kernels,
                                          timeline(log.tasks[start:])]
        except Exception as exc:
            results[name + "-" + attn] = [type(exc).__name__, str(exc)[:300], 0, ""]
for name in sorted(TIMM):
    start = len(log.tasks)
    try:
        batch = {{"x": torch.randn(2, 3, 32, 32), "y": torch.randint(0, 10, (2,))}}
        loss = train(timm_build(name), batch, lambda m, b: F.cross_entropy(m(b["x"]), b["y"]),
                     lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9))
        kernels = sum(t.kind.value == "kernel" for t in log.tasks[start:])
        results[name] = ["ok", str(loss.device), kernels, timeline(log.tasks[start:])]
    except Exception as exc:
        results[name] = [type(exc).__name__, str(exc)[:300], 0, ""]
print(json.dumps(results))
"""


def _train_all(meta_cache: str) -> dict[str, list]:
    here = str(Path(__file__).parent)
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(SCRIPT.format(here=here, tests=str(Path(here).parent))),
            meta_cache,
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=here,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # shapes-only optimizers, GradScaler and DDP run by default in tests/adapter
def test_models_train_shapes_only() -> None:
    results = _train_all("on")
    assert len(results) == 16
    failed = {name: r for name, r in results.items() if r[0] != "ok"}
    assert failed == {}
    assert all(r[1] == "npu:0" and r[2] > 100 for r in results.values())  # kernels launched


@pytest.mark.slow
def test_kept_meta_results_change_no_timeline() -> None:
    """The meta cache (adapter/meta_cache.py) replays kept meta results instead of running the
    meta kernels: every model's device timeline (task names, types, times, shapes) must be the
    one it gives with the cache off."""
    kept, computed = _train_all("on"), _train_all("off")
    assert kept == computed
