"""Per-pipe timing against hand-computed cycles (tables in msprof_py.kernels.costs).

Bytes per cycle = GiB/s x 2**30 / 1.8e9 (0.596523 B/cycle per GiB/s).
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_samples import add_kernel, exp_kernel

from msprof_py.kernels import (
    DataCopy,
    DataCopyPad,
    Exp,
    HardEvent,
    LoadData,
    Mmad,
    Pipe,
    PipeBarrier,
    SetFlag,
    SyncError,
    TBuf,
    TPipe,
    TPosition,
    TQue,
    WaitFlag,
    launch,
)


def _one_copy(nbytes: int):
    x = np.zeros(nbytes // 2 + 16, np.float16)

    def kernel(x) -> None:
        q = TQue(TPosition.VECIN, 1)
        TPipe().InitBuffer(q, 1, nbytes + 32)
        t = q.AllocTensor("float16")
        if nbytes % 32:
            DataCopyPad(t, x, nbytes)
        else:
            DataCopy(t, x, nbytes // 2)

    return launch(kernel, 1, x)


@pytest.mark.parametrize(
    ("nbytes", "cycles"),
    [
        (8192, 322),  # 8 KiB at 42.7 GiB/s = 25.4715 B/cycle: 321.6
        (12288, 373),  # 12 KiB: 42.7 + (68.0 - 42.7) / 2 = 55.35 GiB/s = 33.0175 B/cycle: 372.2
        (32768, 712),  # 32 KiB at 77.2 GiB/s = 46.0516 B/cycle: 711.6
        (100, 236),  # below 1 KiB: the 1 KiB cost, 1024 / (7.3 x 0.596523 = 4.3546): 235.2
    ],
)
def test_one_gm_to_ub_copy(nbytes: int, cycles: int) -> None:
    result = _one_copy(nbytes)
    (instr,) = result.instructions()
    assert (instr.pipe, instr.start, instr.end, instr.nbytes) == ("MTE2", 0, cycles, nbytes)
    assert result.total_cycles == cycles
    assert result.duration_ns == pytest.approx(cycles / 1.8)
    assert result.pipe_busy()["MTE2"] == cycles
    assert result.pipe_busy()["S"] == 1  # one dispatch


@pytest.mark.parametrize(
    ("dtype", "acc", "cycles"),
    [
        (np.float16, np.float32, 4 * 8 * 2),  # 64x128x32 in 16x16x16 fractals
        (np.int8, np.int32, 4 * 4 * 2),  # int8 fractal 16x32x16
    ],
)
def test_one_mmad_costs_its_fractals(dtype, acc, cycles) -> None:
    m, k, n = 64, 128, 32

    def kernel() -> None:
        pipe = TPipe()
        qa, qb, qc = TQue(TPosition.A2, 1), TQue(TPosition.B2, 1), TQue(TPosition.CO1, 1)
        pipe.InitBuffer(qa, 1, m * k * np.dtype(dtype).itemsize)
        pipe.InitBuffer(qb, 1, k * n * np.dtype(dtype).itemsize)
        pipe.InitBuffer(qc, 1, m * n * 4)
        Mmad(qc.AllocTensor(acc), qa.AllocTensor(dtype), qb.AllocTensor(dtype), m, k, n)

    result = launch(kernel, 1)
    (instr,) = result.instructions()
    assert (instr.pipe, instr.cycles) == ("M", cycles)
    assert result.core_type == "mix" and result.cores == 24


def test_double_buffering_overlaps_mte2_with_v() -> None:
    # 4 tiles of 16384 fp16 (32 KiB): copy-in 712 cycles (see above),
    # Exp 128 repeats (32 KiB / 256 B) x 2 = 256,
    # copy-out UB->GM 32 KiB at 108.4 GiB/s = 64.6631 B/cycle: 506.8 -> 507.
    # depth 1: a tile's copy waits for the previous Exp to free the buffer:
    #   4 x (712 + 256) + 507 = 4379
    # depth 2: copies run back to back, each Exp hides under the next copy:
    #   4 x 712 + 256 + 507 = 3611 (saves 3 x 256)
    tile, tiles = 16384, 4
    x = np.linspace(-2, 2, tile * tiles).astype(np.float16)
    z = np.zeros_like(x)
    serial = launch(exp_kernel, 1, x, z, tile, tiles, 1)
    assert np.array_equal(z, np.exp(x))
    double = launch(exp_kernel, 1, x, z, tile, tiles, 2)
    assert serial.total_cycles == 4379
    assert double.total_cycles == 3611
    assert serial.total_cycles - double.total_cycles == 3 * 256
    for r in (serial, double):
        busy = r.pipe_busy()
        assert (busy["MTE2"], busy["V"], busy["MTE3"]) == (4 * 712, 4 * 256, 4 * 507)

    def overlaps(result) -> bool:
        rows = result.instructions()
        mte2 = [(i.start, i.end) for i in rows if i.pipe == "MTE2"]
        vec = [(i.start, i.end) for i in rows if i.pipe == "V"]
        return any(a < d and c < b for a, b in mte2 for c, d in vec)

    assert overlaps(double) and not overlaps(serial)


def test_add_kernel_depth_two_hand_computed() -> None:
    # 8 tiles of 4096 fp16 (8 KiB): two copies of 322 each,
    # Add 32 repeats (8 KiB / 256 B) = 32 cycles.
    # depth 1: copies of tile i+1 wait for Add i: 8 x (644 + 32) + out; depth 2: 8 x 644 + 32 +
    # out, out = UB->GM 8 KiB at 57.8 GiB/s = 34.4790 B/cycle: 237.6 -> 238
    n = 8 * 4096
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal(n).astype(np.float16) for _ in range(2))
    z = np.zeros(n, np.float16)
    one = launch(add_kernel, 1, x, y, z, n, 8, 1)
    two = launch(add_kernel, 1, x, y, z, n, 8, 2)
    assert one.total_cycles == 8 * (644 + 32) + 238
    assert two.total_cycles == 8 * 644 + 32 + 238
    assert np.array_equal(z, x + y)


def _flag_kernel(x, *, sync: bool, set_flag: bool = True, event_id: int = 0):
    def kernel(x) -> None:
        pipe = TPipe()
        buf = TBuf(TPosition.VECCALC)
        pipe.InitBuffer(buf, 16384)
        t = buf.Get("float16")
        DataCopy(t[:4096], x, 4096)  # MTE2, 322 cycles
        if sync:
            if set_flag:
                SetFlag(HardEvent.MTE2_V, event_id)
            WaitFlag(HardEvent.MTE2_V, event_id)
        Exp(t[4096:], t[:4096], 4096)  # V, 32 repeats x 2 = 64

    return launch(kernel, 1, x)


def test_flags_order_pipes_and_their_absence_is_a_race() -> None:
    x = np.ones(4096, np.float16)
    result = _flag_kernel(x, sync=True)
    copy, exp = result.instructions()
    assert (copy.pipe, copy.end) == ("MTE2", 322)
    assert (exp.pipe, exp.start, exp.end) == ("V", 322, 386)
    names = [i.name for i in result.instructions(syncs=True)]
    assert names == ["DataCopy", "SetFlag<MTE2_V>(0)", "WaitFlag<MTE2_V>(0)", "Exp"]
    with pytest.raises(SyncError, match=r"block 0: data race on UB\[0, 8192\): Exp \(V\)"):
        _flag_kernel(x, sync=False)
    with pytest.raises(SyncError, match=r"WaitFlag<HardEvent.MTE2_V>\(0\) has no SetFlag"):
        _flag_kernel(x, sync=True, set_flag=False)
    with pytest.raises(SyncError, match=r"event id 8 of MTE2_V out of range: .* ids 0-7"):
        _flag_kernel(x, sync=True, event_id=8)


def test_auto_sync_waits_instead_of_raising() -> None:
    x = np.ones(4096, np.float16)

    def kernel(x) -> None:
        buf = TBuf(TPosition.VECCALC)
        TPipe().InitBuffer(buf, 16384)
        t = buf.Get("float16")
        DataCopy(t[:4096], x, 4096)
        Exp(t[4096:], t[:4096], 4096)

    result = launch(kernel, 1, x, strict_sync=False)
    assert [(i.start, i.end) for i in result.instructions()] == [(0, 322), (322, 386)]
    assert result.implicit_waits == 1


def test_more_blocks_than_cores_run_in_waves() -> None:
    # vector kernel: 48 vector cores on 910B; one block = 2 tiles of 4096 fp16
    # = 2 x 644 + 32 + 238 with depth 2 = 1558 cycles
    per_block = 8192

    def run(blocks: int):
        n = per_block * blocks
        x = np.ones(n, np.float16)
        return launch(add_kernel, blocks, x, x, np.zeros_like(x), n, 2, 2)

    one = run(1)
    assert one.total_cycles == 2 * 644 + 32 + 238
    full = run(48)
    assert (full.cores, full.waves, full.total_cycles) == (48, 1, one.total_cycles)
    waves = run(96)
    assert (waves.waves, waves.total_cycles) == (2, 2 * one.total_cycles)
    assert sorted(waves.core_results[0].blocks) == [0, 48]
    odd = run(49)
    assert (odd.waves, odd.total_cycles) == (2, 2 * one.total_cycles)
    assert odd.blocks[48].start == one.total_cycles


def test_cube_blocks_spread_over_cube_cores() -> None:
    def kernel() -> None:
        pipe = TPipe()
        qa, qb, qc = TQue(TPosition.A2, 1), TQue(TPosition.B2, 1), TQue(TPosition.CO1, 1)
        for q in (qa, qb, qc):
            pipe.InitBuffer(q, 1, 16 * 16 * 4)
        Mmad(qc.AllocTensor("float32"), qa.AllocTensor("float16"), qb.AllocTensor("float16"),
             16, 16, 16)  # fmt: skip

    result = launch(kernel, 48)
    assert (result.cores, result.waves, result.total_cycles) == (24, 2, 2)


def test_pipe_barrier_all_drains_every_pipe_before_the_next_instruction() -> None:
    # an 8 KiB GM->UB copy (322 cycles) and an Exp on other UB bytes (32 repeats x 2 = 64):
    # independent, so V starts at dispatch (cycle 1) and the kernel ends with the copy, at 322;
    # PipeBarrier(V) orders V only (free); PipeBarrier(ALL) holds the Exp until the copy is
    # done: 322 + 64 = 386
    def kernel(x, barrier) -> None:
        buf = TBuf(TPosition.VECCALC)
        TPipe().InitBuffer(buf, 24576)
        t = buf.Get("float16")
        DataCopy(t[:4096], x, 4096)
        if barrier is not None:
            PipeBarrier(barrier)
        Exp(t[4096:8192], t[8192:], 4096)

    x = np.ones(4096, np.float16)
    for barrier, exp_start, total in ((None, 1, 322), (Pipe.V, 1, 322), (Pipe.ALL, 322, 386)):
        r = launch(kernel, 1, x, barrier)
        (v,) = [i for i in r.instructions() if i.pipe == "V"]
        assert (v.start, v.end, r.total_cycles) == (exp_start, exp_start + 64, total)


@pytest.mark.parametrize(
    ("nbytes", "gm_l1", "l1_l0a"),
    [
        # msKPP's 910B table at 1 KiB: GM->L1 9.9 GiB/s = 5.9056 B/cycle: 173.4;
        # L1->L0A 286.9 GiB/s = 171.1425 B/cycle: 5.98
        (1024, 174, 6),
        # 32 KiB: GM->L1 147.4 GiB/s = 87.9275 B/cycle: 372.7; L1->L0A 434.0 = 258.891: 126.6
        (32768, 373, 127),
    ],
)
def test_cube_side_copies_cost_the_mskpp_table(nbytes: int, gm_l1: int, l1_l0a: int) -> None:
    def kernel(x) -> None:
        pipe = TPipe()
        a1, a2 = TQue(TPosition.A1, 1), TQue(TPosition.A2, 1)
        pipe.InitBuffer(a1, 1, nbytes)
        pipe.InitBuffer(a2, 1, nbytes)
        t = a1.AllocTensor("float16")
        DataCopy(t, x, nbytes // 2)  # GM -> L1 on MTE2
        a1.EnQue(t)
        LoadData(a2.AllocTensor("float16"), a1.DeQue(), nbytes // 2)  # L1 -> L0A on MTE1

    r = launch(kernel, 1, np.ones(nbytes // 2, np.float16))
    cycles = {i.pipe: i.cycles for i in r.instructions()}
    assert (cycles["MTE2"], cycles["MTE1"]) == (gm_l1, l1_l0a)
