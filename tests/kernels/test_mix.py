"""Split mix kernels (kernel_type="mix_aic_1_2"): an AIC + 2 AIVs per block, own pipes each,
cross-core hand-off, PipeUtilization rows per sub-block - against hand-computed cycles.

Copy costs (msprof_py.kernels.costs, 0.596523 B/cycle per GiB/s): GM->UB 8 KiB at 42.7 GiB/s
= 322 cycles, 12 KiB at 55.35 GiB/s = 373 cycles. Cross-core flag latency: 100 cycles.
"""

from __future__ import annotations

import csv

import numpy as np
import pytest

from msprof_py.kernels import (
    CrossCoreSetFlag,
    CrossCoreWaitFlag,
    DataCopy,
    Fixpipe,
    GetBlockIdx,
    GetSubBlockIdx,
    GetSubBlockNum,
    IsAic,
    IsAiv,
    KernelError,
    LoadData,
    Mmad,
    Muls,
    Pipe,
    ScalarWork,
    SyncError,
    TPipe,
    TPosition,
    TQue,
    launch,
    mix,
    pipeutil,
)
from msprof_py.kernels.optrace import trace_events


def _handoff(x) -> None:
    """AIC: 500 scalar cycles, flag 0; AIVs: copy 8 KiB (aiv0) / 12 KiB (aiv1), flag 1;
    AIC waits for both, 10 more scalar cycles."""
    if IsAic():
        ScalarWork(500)
        CrossCoreSetFlag(0)
        CrossCoreWaitFlag(1)
        ScalarWork(10)
    if IsAiv():
        nbytes = 8192 if GetSubBlockIdx() == 0 else 12288
        q = TQue(TPosition.VECIN, 1)
        TPipe().InitBuffer(q, 1, nbytes)
        CrossCoreWaitFlag(0)
        DataCopy(q.AllocTensor("float16"), x, nbytes // 2)
        CrossCoreSetFlag(1, Pipe.MTE2)


def test_handoff_timeline_is_hand_computed() -> None:
    result = launch(_handoff, 1, np.zeros(8192, np.float16), kernel_type="mix_aic_1_2")
    (block,) = result.blocks
    subs = {sb.name: sb for sb in block.sub_blocks}
    # AIC sets at 500, the AIVs see it at 600; aiv0 copies 600-922, aiv1 600-973
    copies = {r.unit: (r.start, r.end) for r in result.instructions() if r.pipe == "MTE2"}
    assert copies == {"aiv0": (600, 922), "aiv1": (600, 973)}
    # the AIC waits for both AIVs' sets: max(922, 973) + 100 = 1073, then 10 cycles
    assert subs["aic"].cycles == 1083
    assert (subs["aiv0"].cycles, subs["aiv1"].cycles) == (922, 973)
    assert result.total_cycles == block.cycles == 1083
    assert subs["aic"].pipe_busy["S"] == 510
    assert subs["aiv1"].pipe_busy == {**dict.fromkeys(subs["aiv1"].pipe_busy, 0), "MTE2": 373,
                                      "S": 1}  # fmt: skip
    assert result.core_type == "mix" and result.split_mix


def test_pipe_utilization_has_a_row_per_aiv_sub_block(tmp_path) -> None:
    result = launch(_handoff, 2, np.zeros(8192, np.float16), kernel_type="mix_aic_1_2")
    path = pipeutil.write(result, tmp_path / "PipeUtilization.csv")
    rows = list(csv.DictReader(path.open()))
    assert [(r["block_id"], r["sub_block_id"]) for r in rows] == [
        ("0", "0"), ("0", "1"), ("1", "0"), ("1", "1")
    ]  # fmt: skip
    r0, r1 = rows[0], rows[1]
    assert (r0["aiv_total_cycles"], r1["aiv_total_cycles"]) == ("922", "973")
    assert r0["aiv_mte2_ratio"] == f"{322 / 922:.3f}" and r1["aiv_mte2_ratio"] == f"{373 / 973:.3f}"
    assert r0["aic_total_cycles"] == r1["aic_total_cycles"] == "1083"
    assert r0["aic_scalar_ratio"] == f"{510 / 1083:.3f}"
    assert r0["aic_mte2_ratio"] == "0.000" and r0["aiv_vec_ratio"] == "0.000"
    assert r0["aiv_time(us)"] == f"{922 / 1.8 / 1000:.3f}"  # 1800 MHz cube clock


def test_trace_has_a_thread_per_sub_core_pipe() -> None:
    result = launch(_handoff, 1, np.zeros(8192, np.float16), kernel_type="mix_aic_1_2")
    events = trace_events(result)
    names = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert {"aic S", "aiv0 MTE2", "aiv1 V"} <= names
    copies = [e for e in events if e.get("ph") == "X" and e["cat"] == "MTE2"]
    assert sorted(e["args"]["unit"] for e in copies) == ["aiv0", "aiv1"]
    assert len({e["tid"] for e in copies}) == 2


M, K, N = 32, 32, 64


def _matmul_scale(a, b, ws, out) -> None:
    """c = a @ b on the AIC (through a GM workspace), out = 2 c on the AIVs, half the rows
    each (single core: all rows)."""
    blk = GetBlockIdx()
    pipe = TPipe()
    if IsAic():
        qa1, qb1 = TQue(TPosition.A1, 1), TQue(TPosition.B1, 1)
        qa2, qb2, qc = TQue(TPosition.A2, 1), TQue(TPosition.B2, 1), TQue(TPosition.CO1, 1)
        for q, n in ((qa1, M * K * 2), (qb1, K * N * 2), (qa2, M * K * 2), (qb2, K * N * 2),
                     (qc, M * N * 4)):  # fmt: skip
            pipe.InitBuffer(q, 1, n)
        for src, q1, q2, n in ((a, qa1, qa2, M * K), (b, qb1, qb2, K * N)):
            t1 = q1.AllocTensor("float16")
            DataCopy(t1, src[blk * M * K if src is a else 0 :], n)
            q1.EnQue(t1)
            t2 = q2.AllocTensor("float16")
            LoadData(t2, q1.DeQue(), n)
            q2.EnQue(t2)
        c = qc.AllocTensor("float32")
        Mmad(c, qa2.DeQue(), qb2.DeQue(), M, K, N)
        qc.EnQue(c)
        Fixpipe(ws[blk * M * N :], qc.DeQue(), M, N)
        CrossCoreSetFlag(0, Pipe.FIX)
    if IsAiv():
        rows = M // GetSubBlockNum()
        off = blk * M * N + GetSubBlockIdx() * rows * N
        qi, qo = TQue(TPosition.VECIN, 1), TQue(TPosition.VECOUT, 1)
        pipe.InitBuffer(qi, 1, rows * N * 2)
        pipe.InitBuffer(qo, 1, rows * N * 2)
        CrossCoreWaitFlag(0)
        x = qi.AllocTensor("float16")
        DataCopy(x, ws[off:], rows * N)
        qi.EnQue(x)
        y = qo.AllocTensor("float16")
        Muls(y, qi.DeQue(), 2.0, rows * N)
        qo.EnQue(y)
        DataCopy(out[off:], qo.DeQue(), rows * N)


def _matmul_inputs(blocks: int):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((blocks, M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    return a, b, np.zeros(blocks * M * N, np.float16), np.zeros(blocks * M * N, np.float16)


def test_mix_values_and_handoff_order() -> None:
    a, b, ws, out = _matmul_inputs(2)
    result = launch(_matmul_scale, 2, a, b, ws, out, kernel_type="mix_aic_1_2")
    ref = 2 * (a.astype(np.float32) @ b.astype(np.float32))
    np.testing.assert_allclose(out.reshape(2, M, N), ref, rtol=2e-3, atol=2e-2)
    instrs = result.instructions()
    fix_end = max(r.end for r in instrs if r.pipe == "FIX" and r.block == 0)
    reads = [r for r in instrs if r.block == 0 and r.pipe == "MTE2" and r.unit.startswith("aiv")]
    assert len(reads) == 2
    assert all(r.start == fix_end + mix.CROSS_CORE_CYCLES for r in reads)
    # each AIV's vector work is half the tile: 16 x 64 fp16 = 8 repeats of 256 B
    vec = [r for r in instrs if r.pipe == "V" and r.block == 0]
    assert sorted(r.unit for r in vec) == ["aiv0", "aiv1"] and {r.cycles for r in vec} == {8}


def test_single_core_runs_the_guarded_kernel_whole() -> None:
    a, b, ws, out = _matmul_inputs(1)
    single = launch(_matmul_scale, 1, a, b, ws, out)
    split_out = np.zeros_like(out)
    launch(_matmul_scale, 1, a, b, np.zeros_like(ws), split_out, kernel_type="mix_aic_1_2")
    np.testing.assert_array_equal(out, split_out)
    assert not single.split_mix and single.core_type == "mix"
    (v,) = [r for r in single.instructions() if r.pipe == "V"]
    assert v.cycles == 16  # all 32 rows on the one vector unit


def test_cube_code_on_an_aiv_names_the_guard() -> None:
    def kernel() -> None:
        TPipe().InitBuffer(TQue(TPosition.A2, 1), 1, 512)

    with pytest.raises(KernelError, match=r"block 0: aiv0: InitBuffer.*L0A belongs to the AIC.*"
                       r"IsAic\(\)"):  # fmt: skip
        launch(kernel, 1, kernel_type="mix_aic_1_2")


def test_vector_code_on_the_aic_names_the_guard() -> None:
    def kernel(x) -> None:
        if IsAic():
            q = TQue(TPosition.VECIN, 1)
            TPipe().InitBuffer(q, 1, 256)

    with pytest.raises(KernelError, match=r"block 0: aic: .*UB belongs to the AIV.*IsAiv"):
        launch(kernel, 1, np.zeros(8, np.float16), kernel_type="mix_aic_1_2")


def test_a_wait_no_one_sets_is_a_hang() -> None:
    def kernel() -> None:
        if IsAiv():
            CrossCoreWaitFlag(3)

    with pytest.raises(SyncError, match=r"never satisfied on aiv0, aiv1"):
        launch(kernel, 1, kernel_type="mix_aic_1_2")


def test_a_two_way_handoff_on_one_core_names_kernel_type() -> None:
    # on one core the AIC side runs first, in program order: its wait for the AIVs' flag 1
    # comes before any AIV code, so the launch fails and says how to launch it
    x = np.zeros(6144, np.float16)
    with pytest.raises(SyncError, match=r"^block 0: CrossCoreWaitFlag\(1\) .*kernel_type="
                       r"'mix_aic_1_2'"):  # fmt: skip
        launch(_handoff, 1, x)
    with pytest.raises(SyncError, match=r"ascend910a has no split mix kernels"):
        launch(_handoff, 1, x, chip="ascend910a")
    assert launch(_handoff, 1, x, kernel_type="mix_aic_1_2").split_mix


def test_mix_needs_a_split_chip() -> None:
    with pytest.raises(KernelError, match="needs a split chip"):
        launch(_handoff, 1, np.zeros(8, np.float16), chip="ascend910a", kernel_type="mix_aic_1_2")
    with pytest.raises(KernelError, match="unknown kernel_type"):
        launch(_handoff, 1, np.zeros(8, np.float16), kernel_type="mix_aic_1_1")


def test_core_pipe_busy_is_the_busiest_unit_not_the_sum() -> None:
    result = launch(_handoff, 1, np.zeros(8192, np.float16), kernel_type="mix_aic_1_2")
    (block,) = result.blocks
    (core,) = result.core_results
    assert block.pipe_busy["MTE2"] == 322 + 373  # work of both AIVs
    assert core.pipe_busy["MTE2"] == 373  # each AIV has its own MTE2: the busier one
    assert block.ratio("MTE2") == pytest.approx(373 / 1083)


def test_cross_core_wait_finding_names_the_stalled_unit() -> None:
    from msprof_py.kernels.findings import findings

    result = launch(_handoff, 1, np.zeros(8192, np.float16), kernel_type="mix_aic_1_2")
    subs = {sb.name: sb for sb in result.blocks[0].sub_blocks}
    # AIVs stall 0 -> 600 for the AIC's flag; the AIC stalls 500 -> 1073 for both AIVs
    assert {u: sb.cross_core_wait for u, sb in subs.items()} == {
        "aic": 573, "aiv0": 600, "aiv1": 600
    }  # fmt: skip
    (hit,) = [f for f in findings(result) if f.rule == "cross-core-wait"]
    # aiv0 has the largest stalled share: 600 of its 922 cycles
    assert hit.message.startswith(
        f"aiv0 stalls {600 / 922:.0%} of its cycles in CrossCoreWaitFlag for the AIC"
    )
    assert f"aic {573 / 1083:.0%}" in hit.message
