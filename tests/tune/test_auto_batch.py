"""auto_batch measures trials in fresh processes in shapes-only mode (real trials)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from msprof_py.tune import auto_batch
from msprof_py.tune.trials import factory_ref, measure

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from tune_models import WIDTH, wide  # noqa: E402

PARAMS_BYTES = (1024 * WIDTH + WIDTH + WIDTH * 10 + 10) * 4


def _spec(batch: int, device: str = "ascend910b") -> dict:
    return {
        "factory": {"module": "tune_models", "name": "wide"},
        "input_shape": [1024], "input_dtype": "float32", "optimizer": "sgd", "amp": "",
        "device": device, "batch": batch,
    }  # fmt: skip


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(HERE))


@pytest.mark.slow
def test_a_trial_measures_the_hand_computed_peak() -> None:
    trial = measure(_spec(64))
    assert not trial.error, trial.error
    # parameters and their gradients, the input and three WIDTH-wide activations per sample
    expected = 2 * PARAMS_BYTES + 64 * 1024 * 4 + 3 * 64 * WIDTH * 4
    assert expected <= trial.peak_bytes <= expected * 1.01  # allocator rounding
    assert trial.step_ns > 0 and trial.capacity_bytes == 62 * 2**30


def test_factory_references() -> None:
    assert factory_ref(wide) == {"module": "tune_models", "name": "wide"}
    assert factory_ref("pkg.mod:build") == {"module": "pkg.mod", "name": "build"}
    with pytest.raises(ValueError, match="module:function"):
        factory_ref("no_colon")
    with pytest.raises(ValueError, match="module-level"):
        factory_ref(lambda: None)


@pytest.mark.slow
def test_the_largest_batch_on_a_small_device(tmp_path: Path) -> None:
    """On a device of 768 MiB, 80% is 614.4 MiB: parameters and gradients (517.5 MiB) leave
    room for about 128 samples by the hand count (0.754 MiB each), but the allocator's
    segments add about 3% at the peak: 112 samples reserve 618 MiB, 96 fit. The tuner
    measures, so it answers 96."""
    spec = tmp_path / "small.toml"
    spec.write_text(
        'base = "ascend910b"\n[memory]\nhbm_capacity_bytes = 805306368\nreserved_bytes = 0\n'
    )
    result = auto_batch(wide, (1024,), device=str(spec), min_batch=64, granularity=16)
    assert result.best == 96
    reserved = {t.batch: t.peak_bytes for t in result.trials}
    assert reserved[96] <= 0.8 * 805306368 < reserved[112]
    assert [t.batch for t in result.trials] == [64, 128, 96, 112]


@pytest.mark.slow
def test_tune_batch_cli_on_a_script(tmp_path: Path) -> None:
    root = HERE.parents[1]
    cmd = [sys.executable, "-m", "msprof_py.cli_entry", "tune-batch", "--min-batch", "128",
           "python", str(root / "sample_runs" / "train_resnet.py"), "--steps", "2"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "largest batch within 80% of device memory: 256 (the cap)" in done.stdout
    assert [line.split()[0] for line in done.stdout.splitlines()[1:3]] == ["128", "256"]
