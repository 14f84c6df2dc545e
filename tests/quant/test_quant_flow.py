"""quantize_dynamic on the npu (host fallback + rule) and the AMCT-like quantize/convert flow."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from msprof_py.device import TaskLog

ROOT = Path(__file__).resolve().parents[2]


def _mlp(d_in: int = 64, hidden: int = 128, d_out: int = 32) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, d_out))


def _dynamic(model: nn.Module) -> nn.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)


def test_quantize_dynamic_runs_on_the_host_between_copies(npu, log: TaskLog) -> None:
    cpu_model = _dynamic(_mlp())
    x = torch.randn(8, 64)
    expected = cpu_model(x)
    model = _dynamic(_mlp()).to("npu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = model(x.to("npu"))
    assert got.device.type == "npu"
    assert torch.equal(got.cpu(), expected)  # the CPU quantized kernels' values
    names = [t.name for t in log.tasks]
    # per quantized Linear: the activation down, the result up; relu stays on the device
    assert names.count("quantized::linear_dynamic (D2H)") == 2
    assert names.count("quantized::linear_dynamic (H2D)") == 2
    assert [t.op_type for t in log.kernels()] == ["Relu"]
    up = [t for t in log.tasks if t.name == "quantized::linear_dynamic (H2D)"]
    assert [t.bytes for t in up] == [8 * 128 * 4, 8 * 32 * 4]
    host = [h for h in log.host if h.name == "quantized::linear_dynamic (host)"]
    # modelled CPU time: a fixed call cost plus 2 m k n at the host int8 rate
    from msprof_py.adapter import host_fallback as hf

    flops = 2 * 8 * 64 * 128
    assert host[0].end_ns - host[0].start_ns == hf.HOST_CALL_NS + -(
        -flops * 10**9 // int(hf.HOST_INT8_OPS_PER_S)
    )


def test_quantized_on_host_rule_fires_on_a_recorded_run() -> None:
    code = """
import warnings; warnings.filterwarnings("ignore")
import torch, msprof_py
from torch import nn
from msprof_py.analyzers import context, engine
from msprof_py.analyzers.rules_compute import RuleContext
torch.manual_seed(0)
with msprof_py.record() as rec:
    m = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256))
    q = torch.ao.quantization.quantize_dynamic(m, {nn.Linear}, dtype=torch.qint8).to("npu")
    x = torch.randn(32, 256).to("npu")
    for _ in range(3):
        q(x)
        msprof_py.step()
data = context.prepare(rec.load(), 0, warmup=0)
f = engine.run_rule("quantized_on_host", RuleContext(data, {0: data}))
ev = f.evidence
print(f.status, ev["copies_per_step"], ev["count_per_step"], len(ev["ops"]),
      ev["copy_bytes_per_step"], f.estimated_gain_us > 0, "npu_quant_matmul" in f.advice)
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr[-2000:]
    # 2 Linear per step, each a D2H and an H2D: 32x256 + 32x512 down, 32x512 + 32x256 up (fp32)
    bytes_per_step = 2 * (32 * 256 + 32 * 512) * 4
    assert out.stdout.split() == [
        "fired", "4.0", "2.0", "2", f"{float(bytes_per_step)}", "True", "True"
    ]  # fmt: skip


def test_amct_like_flow_is_accurate_and_runs_int8_kernels(npu) -> None:
    from msprof_py import quant

    model = _mlp().half().to("npu")
    g = torch.Generator().manual_seed(3)
    batches = [torch.randn(16, 64, generator=g).half().to("npu") for _ in range(4)]
    held_out = torch.randn(16, 64, generator=g).half().to("npu")
    with torch.no_grad():
        float_out = model(held_out).float().cpu()
    calibration = quant.quantize(model, batches, per_channel=True)
    assert set(calibration.layers) == {"0", "2"} and calibration.batches == 4
    report = quant.convert(model, calibration, eval_batch=held_out)
    assert report.layers == ["0", "2"] and report.batch == "held-out"
    assert all(isinstance(model[i], quant.Int8Linear) for i in (0, 2))
    assert model[0].weight.dtype == torch.int8 and model[0].weight.device.type == "npu"
    with torch.no_grad():
        got = model(held_out).float().cpu()
    err = float((got - float_out).abs().max())
    assert report.max_abs_error == pytest.approx(err)
    assert 0 < report.rel_error < 0.03  # int8 error: small, and not zero
    records = TaskLog()
    npu.subscribe(records)
    try:
        with torch.no_grad():
            model(held_out)
    finally:
        npu.unsubscribe(records)
    kernels = [(t.op_type, t.input_dtypes[:2]) for t in records.kernels()]
    assert kernels == [
        ("AscendQuant", ("float16",)),
        ("QuantBatchMatmulV3", ("int8", "int8")),
        ("Relu", ("float16",)),
        ("AscendQuant", ("float16",)),
        ("QuantBatchMatmulV3", ("int8", "int8")),
    ]


def test_per_tensor_weights_are_less_accurate_than_per_channel(npu) -> None:
    from msprof_py import quant

    torch.manual_seed(5)
    base = _mlp()
    with torch.no_grad():  # channels of very different ranges: per-tensor loses the small ones
        base[0].weight.mul_(torch.logspace(-2, 0, 128).unsqueeze(1))
    errors = {}
    for per_channel in (True, False):
        model = _mlp()
        model.load_state_dict(base.state_dict())
        model = model.half().to("npu")
        batches = [torch.randn(16, 64).half().to("npu") for _ in range(2)]
        cal = quant.quantize(model, batches, per_channel=per_channel)
        errors[per_channel] = quant.convert(model, cal).rel_error
    assert errors[True] < errors[False]


def test_quantize_needs_a_linear_and_a_batch(npu) -> None:
    from msprof_py import quant

    with pytest.raises(ValueError, match=r"no nn\.Linear"):
        quant.quantize(nn.ReLU(), [torch.ones(2).to("npu")])
    with pytest.raises(ValueError, match="no batch"):
        quant.quantize(_mlp().to("npu"), [])


def test_int8_sample_quick_runs() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "sample_runs" / "int8_inference.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line for line in out.stdout.splitlines() if line.strip()[:2].strip().isdigit()]
    assert len(rows) == 2  # batch 1 and 16
    for row in rows:
        error = float(row.rsplit("|", 1)[1].strip().rstrip("%"))
        assert 0 < error < 5
