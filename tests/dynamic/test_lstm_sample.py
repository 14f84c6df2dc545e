"""sample_runs/lstm_dynamic.py --quick: the variants' compile counts and what they cost."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from msprof_py.adapter.compile_cache import CompileCache
from msprof_py.device import SimulatedNpu

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "sample_runs"))


@pytest.fixture(scope="module")
def results(npu: SimulatedNpu) -> dict:
    import lstm_dynamic

    return {r.name: r for r in lstm_dynamic.run(lstm_dynamic.QUICK)}


def test_fused_variants_build_once_per_padded_length(npu: SimulatedNpu, results: dict) -> None:
    import lstm_dynamic

    cfg = lstm_dynamic.QUICK
    longest = {lengths[0] for lengths in lstm_dynamic.batches(cfg)}
    gears = {next(g for g in lstm_dynamic.bucket_lengths(cfg) if g >= n) for n in longest}
    assert len(gears) < len(longest)  # the buckets share keys
    assert results["npu_lstm, jit_compile=True"].compiles == len(longest)
    assert results["npu_lstm, jit_compile=False"].tilings == len(longest)
    assert results[f"npu_lstm + {cfg.buckets} buckets, jit_compile=True"].compiles == len(gears)
    for r in results.values():
        if r.name.startswith("npu_lstm"):
            assert r.kernels == cfg.steps  # one DynamicRNN per batch


def test_build_time_is_the_spec_cost_per_build(npu: SimulatedNpu, results: dict) -> None:
    c = npu.spec.compile
    for r in results.values():
        assert r.build_ns == r.compiles * c.online_compile_ns + r.tilings * c.tiling_ns
        jit = r.name.endswith("jit_compile=True")
        assert (r.tilings == 0) if jit else (r.compiles == 0)


def test_cells_build_per_active_batch_size(npu: SimulatedNpu, results: dict) -> None:
    import lstm_dynamic

    cfg = lstm_dynamic.QUICK
    sizes = {
        sum(1 for n in lengths if n > t)
        for lengths in lstm_dynamic.batches(cfg)
        for t in range(lengths[0])
    }
    jit, binary = results["cells, jit_compile=True"], results["cells, jit_compile=False"]
    # two MatMuls and the gate kernel per active batch size, plus the zeros_like fill
    assert jit.compiles == binary.tilings == 3 * len(sizes) + 1
    launches_per_time_step = 3
    steps = sum(lengths[0] for lengths in lstm_dynamic.batches(cfg))
    assert jit.kernels == binary.kernels == launches_per_time_step * steps + cfg.steps


def test_fused_binary_is_faster_than_cells_after_warm_up(results: dict) -> None:
    cells = results["cells, jit_compile=False"]
    fused = results["npu_lstm, jit_compile=False"]
    assert fused.steady_ms < cells.steady_ms


def test_main_prints_the_assumptions_and_the_table(
    npu: SimulatedNpu, cache: CompileCache, capsys: pytest.CaptureFixture[str]
) -> None:
    import lstm_dynamic

    assert lstm_dynamic.main(["--quick", "--steps", "2"]) == 0
    out = capsys.readouterr().out
    assert "online compile per new kernel key: 10000 us ([U]" in out
    assert "cells, jit_compile=True" in out and "npu_lstm + 3 buckets" in out
    assert "modelled: cells with jit compile take" in out
