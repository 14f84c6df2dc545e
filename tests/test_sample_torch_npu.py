"""The issue-4 samples: AMP, a CUDA-written script via transfer_to_npu, torch_npu fused ops."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

import msprof_py.adapter
from msprof_py.device import TaskLog, TaskType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "sample_runs"))


@pytest.mark.slow  # AMP and GradScaler numerics run by default in tests/adapter
def test_amp_sample_trains_in_bf16_with_a_grad_scaler() -> None:
    npu = msprof_py.adapter.install()
    import train_amp

    log = TaskLog()
    npu.subscribe(log)
    try:
        result = train_amp.train(steps=3, batch_size=256)
    finally:
        npu.unsubscribe(log)
    assert all(math.isfinite(x) for x in result.losses) and result.losses[-1] < result.losses[0]
    assert result.scales == [65536.0] * 3
    matmuls = [t for t in log.tasks if t.op_type == "MatMul"]
    assert matmuls and all(t.input_dtypes[0] == "bfloat16" for t in matmuls)
    assert any(t.op_type == "AmpUpdateScale" for t in log.tasks)


def test_torch_npu_sample_uses_one_fused_attention_kernel_per_layer() -> None:
    npu = msprof_py.adapter.install()
    import train_torch_npu

    log = TaskLog()
    npu.subscribe(log)
    try:
        losses = train_torch_npu.train(steps=2, batch_size=2, seq=128)
    finally:
        npu.unsubscribe(log)
    assert losses[1] < losses[0]
    attention = [t for t in log.tasks if t.op_type == "FlashAttentionScore"]
    assert len(attention) == 2 * 2  # two layers, two steps
    assert all(t.task_type is TaskType.MIX_AIC for t in attention)
    assert sum(t.op_type == "ApplyAdamW" for t in log.tasks) == 2
    assert {"RmsNorm", "RotaryMul", "SwiGlu"} <= {t.op_type for t in log.tasks}


def test_cuda_written_sample_runs_on_npu() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "sample_runs" / "train_cuda_migrated.py"), "--steps", "2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("on npu:0") == 2
