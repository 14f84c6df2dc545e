"""The sample runs work and show what they claim."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "sample_runs"))

import acl_pipeline  # noqa: E402


def test_pipeline_overlaps_copies_with_compute() -> None:
    pipeline = acl_pipeline.run("pipeline", chunks=8)
    serial = acl_pipeline.run("serial", chunks=8)
    assert serial.overlap == 0.0
    # only the first upload and the last download run without compute beside them
    assert pipeline.overlap >= 0.8
    assert pipeline.utilization > 2 * serial.utilization
    assert pipeline.elapsed_ns < serial.elapsed_ns / 2
    # same work: the AI Cores are busy for the same time in both variants
    assert pipeline.compute_busy_ns == serial.compute_busy_ns


def test_serial_time_is_the_sum_of_its_stages() -> None:
    from msprof_py.device import DeviceSpec, costmodel
    from msprof_py.device.records import CopyKind

    spec = DeviceSpec.load()
    rows, k, n = 1024, 16384, 16384
    upload = costmodel.copy_ns(spec, CopyKind.H2D, rows * k * 2)
    mm = costmodel.matmul_cost(spec, rows, n, k).duration_ns
    download = costmodel.copy_ns(spec, CopyKind.D2H, rows * n * 2)
    serial = acl_pipeline.run("serial", chunks=3, rows=rows, k=k, n=n)
    assert serial.elapsed_ns == 3 * (upload + mm + download)


def test_pipeline_results_are_correct_with_numerics() -> None:
    for variant in ("pipeline", "serial"):
        result = acl_pipeline.run(variant, chunks=3, rows=32, k=64, n=48, numerics=True)
        assert result.max_error == 0.0


def test_pipeline_script_runs_from_the_command_line() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "sample_runs" / "acl_pipeline.py"), "--chunks", "4"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "pipeline speed-up" in out.stdout and "copy/compute overlap" in out.stdout


def test_unknown_variant() -> None:
    with pytest.raises(ValueError):
        acl_pipeline.run("parallel")
