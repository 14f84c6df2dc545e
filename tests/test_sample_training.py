"""The PyTorch training samples run on the npu device and show what they claim."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import msprof_py.adapter
from msprof_py.device import TaskLog, TaskType

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_runs"
sys.path.insert(0, str(SAMPLES))

# one npu backend per process: the default settings, as every other test uses
NPU = msprof_py.adapter.install()

import train_dataloader  # noqa: E402
import train_resnet  # noqa: E402
import train_transformer  # noqa: E402


def _op_types(log: TaskLog, task_type: TaskType) -> set[str]:
    return {t.op_type for t in log.tasks if t.task_type is task_type}


# ---- ResNet --------------------------------------------------------------------------------


def test_resnet_trains_on_the_cube_units(log: TaskLog) -> None:
    result = train_resnet.train(steps=3, verbose=False)
    assert result.device == "npu" and len(result.losses) == 3
    assert all(math.isfinite(x) for x in result.losses)
    assert result.losses[-1] < result.losses[0]
    cube = _op_types(log, TaskType.AI_CORE)
    assert {"Conv2D", "Conv2DBackpropFilter", "MatMul"} <= cube
    assert "Conv2D" not in _op_types(log, TaskType.AI_VECTOR_CORE)
    # simulated time is deterministic: once warm, every step takes the same time
    assert result.step_ms[1] == result.step_ms[2] > 0.0


def test_resnet_on_npu_computes_what_cpu_computes() -> None:
    npu = train_resnet.train(steps=2, verbose=False)
    cpu = train_resnet.train(steps=2, device="cpu", verbose=False)
    assert npu.losses == cpu.losses


# ---- transformer ---------------------------------------------------------------------------


def test_transformer_trains_with_matmuls_on_the_cube_units(log: TaskLog) -> None:
    result = train_transformer.train(steps=2, verbose=False)
    assert all(math.isfinite(x) for x in result.losses)
    assert result.losses[1] < result.losses[0]
    assert {"MatMul", "BatchMatMul"} <= _op_types(log, TaskType.AI_CORE)
    assert {"SoftmaxV2", "Gelu"} <= _op_types(log, TaskType.AI_VECTOR_CORE)
    assert result.step_ms[0] > 0.0


def test_transformer_losses_on_npu_equal_cpu() -> None:
    npu = train_transformer.train(steps=3, verbose=False)
    cpu = train_transformer.train(steps=3, device="cpu", verbose=False)
    assert npu.losses == cpu.losses
    assert npu.device == "npu" and cpu.device == "cpu"


def _trained_state(device: str, layer_norm: type[torch.nn.Module] | None = None) -> list:
    cfg = train_transformer.Config(seq_len=16, d_model=32, n_layers=1)
    model = train_transformer.build(cfg)
    if layer_norm is not None:
        for module in list(model.modules()):
            for name, child in list(module.named_children()):
                if isinstance(child, torch.nn.LayerNorm):
                    setattr(module, name, layer_norm(cfg.d_model))
    model = model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    tokens, targets = train_transformer.synthetic_tokens(4, cfg)
    for _ in range(2):
        train_transformer.train_step(model, optimizer, tokens.to(device), targets.to(device))
    return [v.detach().cpu() for v in model.state_dict().values()]


class _ManualLayerNorm(torch.nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))
        self.bias = torch.nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + 1e-5) * self.weight + self.bias


def test_transformer_weights_on_npu_equal_cpu_without_layer_norm() -> None:
    npu = _trained_state("npu", _ManualLayerNorm)
    cpu = _trained_state("cpu", _ManualLayerNorm)
    assert all(torch.equal(a, b) for a, b in zip(npu, cpu, strict=True))


def test_transformer_weights_on_npu_equal_cpu() -> None:
    npu = _trained_state("npu")
    cpu = _trained_state("cpu")
    assert all(torch.equal(a, b) for a, b in zip(npu, cpu, strict=True))


# ---- data loading --------------------------------------------------------------------------


def test_prefetcher_overlaps_batch_copies_with_compute() -> None:
    steps = 3
    with_prefetch = train_dataloader.train(steps, batch_size=128, verbose=False)
    plain = train_dataloader.train(steps, batch_size=128, prefetch=False, verbose=False)
    # same data and model: the same losses, whichever stream carried the batches
    assert with_prefetch.losses == plain.losses
    assert all(math.isfinite(x) for x in plain.losses)
    assert with_prefetch.copy_busy_ns == plain.copy_busy_ns > 0
    assert plain.overlap == 0.0
    # every copy but the first (issued before any compute) hides under the previous step
    assert with_prefetch.overlap >= (steps - 1) / steps - 0.05
    assert with_prefetch.mean_step_ms < plain.mean_step_ms


def test_dataloader_copies_come_from_pinned_memory(log: TaskLog) -> None:
    train_dataloader.train(2, batch_size=32, verbose=False)
    batch_bytes = 32 * 3 * 64 * 64 * 4
    copies = [t for t in log.copies() if t.op_type == "MEMCPY_H2D" and t.bytes == batch_bytes]
    assert len(copies) == 2
    assert all(t.attrs and t.attrs.get("pinned") for t in copies)
    # the prefetcher's copies run on its own stream, not on the default stream (0)
    assert all(t.stream_id != 0 for t in copies)


def test_record_stream_accepts_an_npu_stream() -> None:
    torch.ones(4, device="npu").record_stream(torch.npu.current_stream())


# ---- command line --------------------------------------------------------------------------


def test_main_runs_with_the_device_already_installed(capsys: pytest.CaptureFixture) -> None:
    assert train_resnet.main(["--steps", "1"]) == 0
    assert train_transformer.main(["--steps", "1", "--batch-size", "2"]) == 0
    assert train_dataloader.main(["--steps", "2", "--batch-size", "16", "--no-prefetch"]) == 0
    out = capsys.readouterr().out
    assert out.count("mean step time (simulated)") == 3
    assert "step 1/1  loss" in out


@pytest.mark.parametrize(
    "script, args",
    [
        # the ResNet sample runs under msprof in the report, gate and analysis tests
        pytest.param(
            "train_resnet.py", ["--steps", "2", "--batch-size", "4"], marks=pytest.mark.slow
        ),
        ("train_transformer.py", ["--steps", "2", "--batch-size", "2"]),
        ("train_dataloader.py", ["--steps", "2", "--batch-size", "16"]),
    ],
)
def test_script_runs_from_the_command_line(script: str, args: list[str]) -> None:
    out = subprocess.run(
        [sys.executable, str(SAMPLES / script), *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert "step 2/2  loss" in out.stdout
    assert "mean step time (simulated)" in out.stdout
