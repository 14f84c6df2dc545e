"""Shapes-only mode (``numerics="none"``) runs the standard training recipes.

Every test starts fresh interpreters (a process installs the npu device once). The policy under
test is :mod:`msprof_py.adapter.shapes_only`: values the host sent are known, framework reads
of computed values get placeholder zeros, any other read fails clearly.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from adapter_helpers import run_script

ROOT = Path(__file__).resolve().parents[2]


def _json_of(code: str) -> Any:
    """Run ``code`` in a fresh interpreter; the JSON it prints on its last line."""
    result = run_script(code)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


# ---- optimizers --------------------------------------------------------------------------

_OPTIMIZERS = {
    "SGD momentum (foreach)": "O.SGD(p, lr=0.1, momentum=0.9)",
    "SGD momentum (for-loop)": "O.SGD(p, lr=0.1, momentum=0.9, foreach=False)",
    "SGD momentum (fused)": "O.SGD(p, lr=0.1, momentum=0.9, fused=True)",
    "Adam (foreach)": "O.Adam(p)",
    "Adam (fused)": "O.Adam(p, fused=True)",
    "AdamW (foreach)": "O.AdamW(p)",
    "AdamW (fused)": "O.AdamW(p, fused=True)",
    "Adagrad (foreach)": "O.Adagrad(p)",
    "Adagrad (fused)": "O.Adagrad(p, fused=True)",
    "RMSprop (foreach)": "O.RMSprop(p, momentum=0.9)",
    "RMSprop (for-loop)": "O.RMSprop(p, momentum=0.9, foreach=False)",
    "NpuFusedAdamW": "torch_npu.optim.NpuFusedAdamW(p)",
    "NpuFusedAdam": "torch_npu.optim.NpuFusedAdam(p)",
    "NpuFusedSGD": "torch_npu.optim.NpuFusedSGD(p, lr=0.1, momentum=0.9)",
}


@pytest.fixture(scope="module")
def optimizer_runs() -> dict[str, Any]:
    """Three steps of every optimizer on shapes only: the error, or the tasks of each step."""
    makers = "{" + ", ".join(f"{k!r}: lambda p: {v}" for k, v in _OPTIMIZERS.items()) + "}"
    return _json_of(
        f"""
        import json, torch, torch.nn as nn, msprof_py.adapter as ad
        from msprof_py.device import TaskLog
        from msprof_py.adapter.tensors import backing_of
        npu = ad.install(numerics="none")
        import torch_npu
        O = torch.optim
        log = TaskLog(); npu.subscribe(log)
        runs = {{}}
        for name, make in {makers}.items():
            model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to("npu")
            opt = make(model.parameters())
            steps = []
            try:
                for _ in range(3):
                    opt.zero_grad()
                    model(torch.randn(2, 8, device="npu")).sum().backward()
                    before = len(log.tasks)
                    opt.step()
                    steps.append(len(log.tasks) - before)
                runs[name] = {{"error": None, "steps": steps,
                              "meta": all(backing_of(p).device.type == "meta"
                                          for p in model.parameters())}}
            except Exception as exc:
                runs[name] = {{"error": f"{{type(exc).__name__}}: {{exc}}"}}
        print(json.dumps(runs))
        """
    )


@pytest.mark.parametrize("name", list(_OPTIMIZERS))
def test_optimizers_run_three_steps_on_shapes_only(
    optimizer_runs: dict[str, Any], name: str
) -> None:
    run = optimizer_runs[name]
    assert run["error"] is None, run["error"]
    first, second, third = run["steps"]
    assert second > 0 and second == third  # every step launches the same kernels
    assert first > 0
    assert run["meta"]  # the parameters still hold no values


# ---- GradScaler, AMP models ----------------------------------------------------------------

_TRAIN = """
import json, torch, torch.nn as nn, msprof_py.adapter as ad
from msprof_py.adapter import shapes_only
from msprof_py.device import TaskLog
npu = ad.install(numerics="none")
log = TaskLog(); npu.subscribe(log)

def train(model, batch, scaler, opt, clip=False):
    loss_fn = nn.CrossEntropyLoss()
    syncs = []
    for _ in range(3):
        x, y = batch()
        with torch.autocast("npu", dtype=torch.float16):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        if clip:
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        before = len(log.tasks)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        syncs.append([t.op_type for t in log.tasks[before:]])
    return syncs
"""


def _step_tasks(steps: list[list[str]]) -> None:
    """Each step: the host's found-inf read (a D2H copy), then the optimizer's kernels."""
    for tasks in steps:
        assert tasks.count("MEMCPY_D2H") == 1, tasks
        assert len(tasks) > tasks.index("MEMCPY_D2H") + 1  # the update ran after the read


def test_grad_scaler_steps_on_shapes_only() -> None:
    out = _json_of(
        _TRAIN
        + """
res = {}
for name, make in (("torch.amp", lambda: torch.amp.GradScaler("npu")),
                   ("torch.npu.amp", lambda: torch.npu.amp.GradScaler())):
    model = nn.Linear(16, 10).to("npu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    batch = lambda: (torch.randn(4, 16, device="npu"), torch.randint(0, 10, (4,), device="npu"))
    res[name] = train(model, batch, make(), opt)
res["reads"] = dict(shapes_only.PLACEHOLDER_READS)
res["names"] = sorted({t.name for t in log.tasks if t.op_type == "MEMCPY_D2H"})
print(json.dumps(res))
"""
    )
    _step_tasks(out["torch.amp"])
    _step_tasks(out["torch.npu.amp"])
    # one found-inf read per step and scaler, made by GradScaler, answered with the placeholder
    assert out["reads"] == {"torch.amp.grad_scaler": 6}
    assert out["names"] == ["Tensor.item() (aten::_local_scalar_dense) (value)"]


def test_a_cnn_and_a_transformer_train_with_amp_on_shapes_only() -> None:
    out = _json_of(
        _TRAIN
        + """
cnn = nn.Sequential(
    nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
).to("npu")
images = lambda: (torch.randn(8, 3, 32, 32, device="npu"),
                  torch.randint(0, 10, (8,), device="npu"))
res = {"cnn": train(cnn, images, torch.amp.GradScaler("npu"),
                    torch.optim.SGD(cnn.parameters(), lr=0.1, momentum=0.9))}

class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(100, 64)
        layer = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(64, 10)
    def forward(self, tokens):
        return self.head(self.encoder(self.embed(tokens)).mean(1))

tagger = Tagger().to("npu")
tokens = lambda: (torch.randint(0, 100, (4, 12), device="npu"),
                  torch.randint(0, 10, (4,), device="npu"))
res["transformer"] = train(tagger, tokens, torch.amp.GradScaler("npu"),
                           torch.optim.AdamW(tagger.parameters()), clip=True)
res["op_types"] = sorted({t.op_type for t in log.tasks})
print(json.dumps(res))
"""
    )
    _step_tasks(out["cnn"])
    _step_tasks(out["transformer"])
    assert {"Conv2D", "Conv2DBackpropFilter", "MatMul", "Cast"} <= set(out["op_types"])


# ---- what the host reads ---------------------------------------------------------------------


def test_values_the_host_sent_read_back_exactly() -> None:
    out = _json_of(
        """
        import json, torch, msprof_py.adapter as ad
        from msprof_py.device import TaskLog
        npu = ad.install(numerics="none")
        log = TaskLog(); npu.subscribe(log)
        t = torch.tensor([3, 4, 5], device="npu")
        u = torch.empty(3, dtype=torch.float64, device="npu")
        u.copy_(t)  # a device copy of known values: known, converted
        res = {"t": t.cpu().tolist(), "item": t[1].item(), "u": u.cpu().tolist()}
        res["derived"] = (u * 2).cumsum(0).cpu().tolist()  # computed from known values: known
        res["d2h"] = [x.bytes for x in log.tasks if x.op_type == "MEMCPY_D2H"]
        res["kernels"] = [x.op_type for x in log.tasks if x.kind.value == "kernel"]
        t.add_(1)  # an in-place op on known values: still known
        res["added"] = t.cpu().tolist()
        t.add_(torch.randn(3, device="npu").long())  # mixed with unknown (random) values
        for name, read in (("after add_", lambda: t.cpu()), ("computed", lambda: (t * 2).cpu())):
            try:
                read()
                res[name] = "no error"
            except ad.NumericsNoneError as exc:
                res[name] = str(exc)
        print(json.dumps(res))
        """
    )
    assert out["t"] == [3, 4, 5] and out["item"] == 4 and out["u"] == [3.0, 4.0, 5.0]
    assert out["derived"] == [6.0, 14.0, 24.0]
    assert out["added"] == [4, 5, 6]
    assert out["d2h"] == [24, 8, 24, 24]  # each read is still a D2H copy on the timeline
    assert "Mul" in out["kernels"] and "Cumsum" in out["kernels"]  # and the kernels still run
    for name in ("after add_", "computed"):
        assert out[name].startswith("copying npu tensor values to the host"), out[name]
        assert "numerics='none'" in out[name]


def test_a_checkpoint_loads_onto_the_npu_on_shapes_only() -> None:
    """``torch.load(..., map_location="npu")`` restores a CPU checkpoint onto meta-backed npu
    storages (no values held), its values still known to read back, and a model loads it."""
    out = _json_of(
        """
        import io, json, torch, msprof_py.adapter as ad
        from msprof_py.adapter.tensors import backing_of
        ad.install(numerics="none")
        source = torch.nn.Linear(3, 2)
        buffer = io.BytesIO()
        torch.save(source.state_dict(), buffer)
        buffer.seek(0)
        loaded = torch.load(buffer, map_location="npu")
        model = torch.nn.Linear(3, 2).to("npu")
        model.load_state_dict(loaded)
        print(json.dumps({
            "devices": sorted({str(t.device) for t in loaded.values()}),
            "backings": sorted({backing_of(t).device.type for t in loaded.values()}),
            "weight": torch.equal(loaded["weight"].cpu(), source.weight.detach()),
            "output": list(model(torch.randn(4, 3, device="npu")).shape),
        }))
        """
    )
    assert out == {"devices": ["npu:0"], "backings": ["meta"], "weight": True, "output": [4, 2]}


def test_application_reads_of_computed_values_fail_clearly() -> None:
    result = run_script(
        """
        import torch, torch.nn as nn, msprof_py.adapter as ad
        ad.install(numerics="none")
        model = nn.Linear(8, 1).to("npu")
        loss = model(torch.randn(4, 8, device="npu")).mean()
        for name, read in (
            ("item", lambda: loss.item() > 1.0),
            ("bool", lambda: bool(loss > 1.0)),
            ("cpu", lambda: loss.cpu()),
            ("mask", lambda: loss.reshape(1)[loss.reshape(1) > 0]),
        ):
            try:
                read()
                print(name, "no error")
            except ad.NumericsNoneError as exc:
                print(name, exc)
        """
    )
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(" ", 1) for line in result.stdout.strip().splitlines())
    assert lines["item"].startswith("Tensor.item() (aten::_local_scalar_dense) at <string>:")
    assert "needs tensor values" in lines["item"]  # the read is named with its place
    assert lines["bool"].startswith("Tensor.item()")
    assert lines["cpu"].startswith("copying npu tensor values to the host")
    assert lines["mask"].startswith("aten::") and "needs tensor values" in lines["mask"]
    assert all("numerics='none'" in v for v in lines.values())


def test_framework_reads_get_placeholders_and_still_sync() -> None:
    out = _json_of(
        """
        import json, torch, msprof_py.adapter as ad
        from msprof_py.adapter import shapes_only
        from msprof_py.device import TaskLog
        npu = ad.install(numerics="none")
        log = TaskLog(); npu.subscribe(log)
        x = torch.randn(3, 5, dtype=torch.float16, device="npu") * 2
        # this script's reads stand for a framework module's
        shapes_only.FRAMEWORK_READERS += ("__main__",)
        host = x.cpu()
        res = {"shape": list(host.shape), "dtype": str(host.dtype), "device": str(host.device),
               "zeros": bool((host == 0).all()), "item": x.sum().item(),
               "bool": bool(x.isinf().any()), "reads": dict(shapes_only.PLACEHOLDER_READS),
               "d2h": [(t.name, t.bytes) for t in log.tasks if t.op_type == "MEMCPY_D2H"]}
        print(json.dumps(res))
        """
    )
    assert out["shape"] == [3, 5] and out["dtype"] == "torch.float16" and out["device"] == "cpu"
    assert out["zeros"] and out["item"] == 0.0 and out["bool"] is False  # finite, no inf
    assert out["reads"] == {"__main__": 3}
    item = "Tensor.item() (aten::_local_scalar_dense) (value)"
    assert out["d2h"] == [["aten::copy_ (D2H)", 30], [item, 8], [item, 8]]


def test_clip_grad_norm_fused_reads_a_norm_within_bounds() -> None:
    out = _json_of(
        """
        import json, torch, torch.nn as nn, msprof_py.adapter as ad
        from msprof_py.adapter import shapes_only
        from msprof_py.device import TaskLog
        npu = ad.install(numerics="none")
        import torch_npu
        log = TaskLog(); npu.subscribe(log)
        model = nn.Linear(8, 4).to("npu")
        opt = torch_npu.optim.NpuFusedAdamW(model.parameters())
        model(torch.randn(2, 8, device="npu")).sum().backward()
        norm = opt.clip_grad_norm_fused_(1.0)
        print(json.dumps({"shape": list(norm.shape), "reads": dict(shapes_only.PLACEHOLDER_READS),
                          "tasks": [t.op_type for t in log.tasks][-2:]}))
        """
    )
    assert out["shape"] == []
    assert out["reads"] == {"msprof_py.adapter.torch_npu.optim": 1}
    assert out["tasks"] == ["LpNormV2", "MEMCPY_D2H"]  # the norm, its read; no scaling


# ---- DistributedDataParallel, two ranks -----------------------------------------------------

_DDP = """
import json, os, sys, torch, torch.nn as nn, torch.distributed as dist
import msprof_py.adapter as ad, msprof_py.adapter.distributed as hccl
from msprof_py.device import TaskLog, TaskType
npu = ad.install(numerics="none")
hccl.register()
dist.init_process_group("hccl")
rank = dist.get_rank()
res = {}
try:  # ranks with different models: DDP's check reads the real parameter counts
    nn.parallel.DistributedDataParallel(
        nn.Sequential(*[nn.Linear(4, 4) for _ in range(rank + 1)]).to("npu"))
    res["mismatch"] = "no error"
except Exception as exc:
    res["mismatch"] = str(exc)
log = TaskLog(); npu.subscribe(log)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to("npu")
ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.0001)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
for _ in range(3):
    opt.zero_grad()
    ddp(torch.randn(2, 8, device="npu")).sum().backward()
    opt.step()
data = ddp._get_ddp_logging_data()
res["rebuilt"] = data["has_rebuilt_buckets"]
res["buckets"] = data["rebuilt_bucket_sizes"]
res["hccl"] = [(t.name, t.bytes) for t in log.tasks if t.task_type is TaskType.HCCL]
res["d2h"] = [(t.name, t.bytes) for t in log.tasks if t.op_type == "MEMCPY_D2H"]
with open(os.path.join(sys.argv[1], f"rank{rank}.json"), "w") as f:
    json.dump(res, f)
dist.destroy_process_group()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ddp_trains_on_shapes_only(tmp_path: Path) -> None:
    script = tmp_path / "ddp.py"
    script.write_text(textwrap.dedent(_DDP), encoding="utf-8")
    port = str(_free_port())
    procs = []
    for rank in range(2):
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        env.update(
            RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
            MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
        )  # fmt: skip
        procs.append(
            subprocess.Popen(
                [sys.executable, str(script), str(tmp_path)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    try:
        outputs = [p.communicate(timeout=120)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for res in ranks:
        assert "DDP expects same model across all ranks" in res["mismatch"], res["mismatch"]
        # the buckets were rebuilt from the indices rank 0 broadcast: the two Linear layers
        # (4*16+4 and 8*16+16 fp32 values), in the order their gradients became ready
        assert res["rebuilt"] == 1 and res["buckets"] == "272, 576"
        hccl = res["hccl"]
        # the constructor: parameter count (an all-gather of one int64 per rank), shapes
        # (2 sizes + 2 strides per dimension, int64) and the parameters from rank 0
        assert hccl[:3] == [["hcom_allgather_", 16], ["hcom_broadcast_", 96],
                            ["hcom_broadcast_", 848]]  # fmt: skip
        # step 1 reduces one bucket; the rebuild broadcasts indices (4 params + count, int32)
        # and bucket sizes (2, int32), then every step reduces the rebuilt buckets
        assert hccl[3:] == [["hcom_allreduce_", 848], ["hcom_broadcast_", 20],
                            ["hcom_broadcast_", 8]] + [["hcom_allreduce_", 272],
                            ["hcom_allreduce_", 576]] * 2  # fmt: skip
        item = "Tensor.item() (aten::_local_scalar_dense) (value)"
        d2h = "aten::copy_ (D2H)"
        # the host reads every rank's count, the shapes, then the rebuild's indices and sizes
        assert res["d2h"] == [[item, 8], [item, 8], [d2h, 96], [d2h, 20], [d2h, 8]]
