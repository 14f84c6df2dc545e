"""The sample runs, recorded under msprof, produce the findings they were written to show.

The recordings run once per module, in parallel subprocesses (one recording per process).
The fp32 transformer is recorded at d_model 1024: at the sample's default size (128) its
matmuls are so small that the device model says AMP would not pay for its casts.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from msprof_py.analyzers import Analysis, analyze
from msprof_py.analyzers.findings import FIRED, SKIPPED

ROOT = Path(__file__).resolve().parents[2]
RUNS = {
    "resnet": ["train_resnet.py", "--steps", "3"],
    "transformer": [
        "train_transformer.py",
        "--steps",
        "2",
        "--d-model",
        "1024",
        "--seq-len",
        "128",
    ],
    "dataloader": ["train_dataloader.py", "--steps", "3", "--no-prefetch"],
}


def record(runs: dict[str, list[str]], folder: Path) -> dict[str, Path]:
    """Record each sample under msprof in its own process, all at once; their output folders."""
    procs = {}
    for name, argv in runs.items():
        cmd = [
            sys.executable,
            "-m",
            "msprof_py.cli_entry",
            f"--output={folder / name}",
            "python",
            str(ROOT / "sample_runs" / argv[0]),
            *argv[1:],
        ]
        procs[name] = subprocess.Popen(
            cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    for name, proc in procs.items():
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"{name}: {out[-2000:]}"
    return {name: folder / name for name in runs}


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Analysis]:
    dirs = record(RUNS, tmp_path_factory.mktemp("samples"))
    return {name: analyze(path) for name, path in dirs.items()}


def fired(a: Analysis) -> set[str]:
    return {f.rule for f in a.findings if f.status == FIRED}


def test_no_rule_breaks_on_a_real_profile(results: dict[str, Analysis]) -> None:
    for name, a in results.items():
        for f in a.findings:
            assert "internal error" not in f.message, (name, f.message)
        assert a.profile["warmup_skipped"] == [0]


def test_cnn_shows_conv_bn_relu_fusion_and_transdata(results: dict[str, Analysis]) -> None:
    a = results["resnet"]
    assert {"fusion_conv_bn_relu", "transdata_heavy"} <= fired(a)
    fusion = a.finding("fusion_conv_bn_relu")
    assert fusion.gain_model == "modelled" and fusion.estimated_gain_us > 0
    assert "convolution_overrideable+native_batch_norm" in fusion.message
    td = a.finding("transdata_heavy")
    assert td.evidence["causes"]  # the ops that cause the conversions
    assert "fusion_attention" not in fired(a) and "amp_fp32_cube" not in fired(a)
    # the int64 BatchNorm counter runs on the AI CPU: a framework internal, not user code
    aicpu = a.finding("aicpu_fallback")
    assert "BatchNorm2d" in aicpu.message and aicpu.evidence["framework_us_per_step"] > 0
    # both replayed changes re-costed together: at most the step, and named beside the bound
    joint = a.joint
    assert {"fusion_conv_bn_relu", "transdata_heavy"} <= set(joint["rules"])
    assert 0 < joint["gain_us"] <= a.profile["mean_step_ns"] / 1e3
    assert set(joint["not_included"]) <= fired(a) - set(joint["rules"])


def test_fp32_transformer_shows_amp_and_attention_fusion(results: dict[str, Analysis]) -> None:
    a = results["transformer"]
    assert {"amp_fp32_cube", "fusion_attention"} <= fired(a)
    attention = a.finding("fusion_attention")
    assert "bmm" in attention.message and "_softmax" in attention.message
    assert "npu_fusion_attention" in attention.advice
    assert a.finding("amp_fp32_cube").evidence["ops"]
    assert "fusion_conv_bn_relu" not in fired(a)


def test_copies_without_prefetch_show_the_copy_finding(results: dict[str, Analysis]) -> None:
    a = results["dataloader"]
    copy = a.finding("exposed_copies")
    assert copy.status == FIRED and copy.priority == "high"
    assert "H2D" in copy.message
    assert copy.estimated_gain_us > 0 and copy.gain_model == "modelled"
    assert a.copy["summary"][0]["copy_ratio"] > 0.05
    # with host time modelled the loader's waits are measured beside the timeline: the rule
    # answers from them (fired or ok depends on this host's speed), per step
    loader = a.finding("slow_dataloader")
    assert loader.status != SKIPPED, loader.message
    assert loader.evidence["measured_waits"] and loader.evidence["worker_processes"] is False


def test_tables_cover_the_recorded_steps(results: dict[str, Analysis]) -> None:
    a = results["resnet"]
    steps = a.step_breakdown["steps"]
    assert steps["step"].tolist() == [1, 2]
    assert (steps["computing_ns"] > 0).all() and (steps["utilisation"] <= 1.0).all()
    assert not a.top_ops["by_type"].empty and not a.op_statistic.empty
    assert a.memory["summary"][0]["peak_allocated"] > 0


@pytest.mark.slow
def test_modelled_gains_agree_with_the_simulator(tmp_path: Path) -> None:
    """Apply the change the finding proposes and re-run: the step gets faster by about the
    modelled gain (within a factor of two)."""
    dirs = record(
        {
            "np": ["train_dataloader.py", "--steps", "3", "--no-prefetch"],
            "prefetch": ["train_dataloader.py", "--steps", "3"],
        },
        tmp_path,
    )
    a = {name: analyze(path) for name, path in dirs.items()}

    def last_step(x: Analysis) -> float:  # steady state: the first prefetch starts cold
        return x.step_breakdown["steps"]["step_ns"].iloc[-1] / 1e3

    gain = a["np"].finding("exposed_copies").estimated_gain_us
    real = last_step(a["np"]) - last_step(a["prefetch"])
    assert real / 2 <= gain <= real * 2
    # AMP's estimate is checked by applying it: tests/advice/test_recommendation_check.py


def test_recorded_figures_add_up(results: dict[str, Analysis]) -> None:
    """The invariants of test_analyze_invariants on every recorded sample."""
    from test_analyze_invariants import check_document, check_steps

    from msprof_py.analyzers import context
    from msprof_py.analyzers.api import resolve

    for name, a in results.items():
        check_document(a.to_json())
        profile = resolve(a.profile["path"])
        check_steps(context.prepare(profile, a.profile["focus_rank"]))
        assert a.profile["step_windows"] == "device", name


@pytest.mark.slow
def test_loops_whose_steps_are_not_what_they_seem(tmp_path: Path) -> None:
    """sample_runs/train_loops.py: the host running ahead, an eval pass in the loop, a GAN."""
    from test_analyze_invariants import check_document

    dirs = record(
        {
            "nosync": ["train_loops.py", "--loop", "nosync", "--steps", "5"],
            "eval": ["train_loops.py", "--loop", "eval", "--steps", "7", "--eval-every", "4"],
            "gan": ["train_loops.py", "--loop", "gan", "--steps", "3"],
        },
        tmp_path,
    )
    a = {name: analyze(path) for name, path in dirs.items()}
    for x in a.values():
        check_document(x.to_json())
    nosync = a["nosync"].to_json()["headline"]
    assert nosync["utilisation"] > 0.9  # device-bound: busy, not "0% busy at 107% utilisation"
    assert a["nosync"].finding("low_utilisation").status == "ok"
    assert a["nosync"].finding("sync_in_loop").status == "ok"  # queue-full waits are no syncs
    assert [o["step"] for o in a["eval"].profile["outlier_steps"]] == [3]
    assert 3 not in a["eval"].profile["steps_analysed"]
    assert a["gan"].profile["optimizers_per_step"] == 2
    assert any("2 optimizers" in n for n in a["gan"].profile["notes"])
