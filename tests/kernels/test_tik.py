"""The TIK facade runs on the same core model: same values, same cycles as Ascend C."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_samples import add_kernel

from msprof_py.kernels import OperandError, launch, tik


def _tik_add(n: int, tile: int, blocks: int) -> tik.Tik:
    t = tik.Tik()
    x = t.Tensor("float16", (n,), name="x", scope=tik.scope_gm)
    y = t.Tensor("float16", (n,), name="y", scope=tik.scope_gm)
    z = t.Tensor("float16", (n,), name="z", scope=tik.scope_gm)
    tiles = n // blocks // tile
    burst = tile * 2 // 32
    with t.for_range(0, blocks, block_num=blocks) as b:
        xu = t.Tensor("float16", (tile,), name="x_ub", scope=tik.scope_ubuf)
        yu = t.Tensor("float16", (tile,), name="y_ub", scope=tik.scope_ubuf)
        zu = t.Tensor("float16", (tile,), name="z_ub", scope=tik.scope_ubuf)
        with t.for_range(0, tiles) as i:
            off = (b * tiles + i) * tile
            t.data_move(xu, x[off], 0, 1, burst, 0, 0)
            t.data_move(yu, y[off], 0, 1, burst, 0, 0)
            t.vec_add(128, zu, xu, yu, tile // 128, 8, 8, 8)
            t.data_move(z[off], zu, 0, 1, burst, 0, 0)
    t.BuildCCE(kernel_name="add_tik", inputs=[x, y], outputs=[z])
    return t


@pytest.mark.parametrize("blocks", [1, 2])
def test_tik_vec_add_matches_ascend_c_timing(blocks: int) -> None:
    n, tile = 4 * 4096 * blocks, 4096
    rng = np.random.default_rng(11)
    x, y = (rng.standard_normal(n).astype(np.float16) for _ in range(2))
    result = _tik_add(n, tile, blocks).run({"x": x, "y": y})
    assert np.array_equal(result.outputs["z"], x + y)
    # the Ascend C spelling with single buffers (TIK's buffers are single too)
    z = np.zeros(n, np.float16)
    ascend_c = launch(add_kernel, blocks, x, y, z, n, 4, 1)
    assert result.total_cycles == ascend_c.total_cycles == 4 * (644 + 32) + 238
    assert result.pipe_busy() == ascend_c.pipe_busy()
    assert result.name == "add_tik" and result.block_dim == blocks
    assert result.implicit_waits > 0  # TIK's automatic synchronisation did the ordering


def test_tik_exp_muls_and_matmul_values() -> None:
    t = tik.Tik()
    x = t.Tensor("float16", (256,), name="x", scope=tik.scope_gm)
    out = t.Tensor("float16", (256,), name="out", scope=tik.scope_gm)
    xu = t.Tensor("float16", (256,), name="xu", scope=tik.scope_ubuf)
    t.data_move(xu, x, 0, 1, 16, 0, 0)
    t.vec_exp(128, xu, xu, 2, 8, 8)
    t.vec_muls(128, xu, xu, 0.5, 2, 8, 8)
    t.data_move(out, xu, 0, 1, 16, 0, 0)
    t.BuildCCE("exp_half", [x], [out])
    xs = np.linspace(-1, 1, 256).astype(np.float16)
    r = t.run({"x": xs})
    assert np.array_equal(r.outputs["out"], np.exp(xs) * np.float16(0.5))
    v = [i for i in r.instructions() if i.pipe == "V"]
    assert [(i.name, i.cycles) for i in v] == [("Exp", 4), ("Muls", 2)]

    m = t2 = tik.Tik()
    a = m.Tensor("float16", (16, 32), name="a", scope=tik.scope_gm)
    b = m.Tensor("float16", (32, 16), name="b", scope=tik.scope_gm)
    c = m.Tensor("float16", (16, 16), name="c", scope=tik.scope_gm)
    a1 = m.Tensor("float16", (16, 32), name="a1", scope=tik.scope_cbuf)
    b1 = m.Tensor("float16", (32, 16), name="b1", scope=tik.scope_cbuf)
    a2 = m.Tensor("float16", (16, 32), name="a2", scope=tik.scope_ca)
    b2 = m.Tensor("float16", (32, 16), name="b2", scope=tik.scope_cb)
    c0 = m.Tensor("float32", (16, 16), name="c0", scope=tik.scope_cc)
    m.data_move(a1, a, 0, 1, 32, 0, 0)
    m.data_move(b1, b, 0, 1, 32, 0, 0)
    m.data_move(a2, a1, 0, 1, 32, 0, 0)
    m.data_move(b2, b1, 0, 1, 32, 0, 0)
    m.matmul(c0, a2, b2, 16, 32, 16)
    m.fixpipe(c, c0, 16, 16)
    t2.BuildCCE("mm", [a, b], [c])
    rng = np.random.default_rng(2)
    av = rng.standard_normal((16, 32)).astype(np.float16)
    bv = rng.standard_normal((32, 16)).astype(np.float16)
    rr = m.run({"a": av, "b": bv})
    ref = (av.astype(np.float32) @ bv.astype(np.float32)).astype(np.float16)
    np.testing.assert_allclose(rr.outputs["c"].astype(np.float32), ref, rtol=2e-3, atol=1e-2)
    assert [i.cycles for i in rr.instructions() if i.pipe == "M"] == [2]  # 1 x 2 x 1 fractals


def test_tik_rejects_a_mask_wider_than_a_repeat() -> None:
    t = tik.Tik()
    u = t.Tensor("float32", (128,), name="u", scope=tik.scope_ubuf)
    with pytest.raises(OperandError, match=r"vec_add: mask 128 outside 1..64 for float32"):
        t.vec_add(128, u, u, u, 1, 8, 8, 8)


def test_tik_reduce_and_conv_are_the_ascend_c_instructions() -> None:
    # softmax pieces in TIK spelling: row max (fp16), widen to fp32, row sum
    t = tik.Tik()
    x = t.Tensor("float16", (256,), name="x", scope=tik.scope_gm)
    mx = t.Tensor("float16", (16,), name="mx", scope=tik.scope_gm)
    sm = t.Tensor("float32", (8,), name="sm", scope=tik.scope_gm)
    xu = t.Tensor("float16", (256,), name="xu", scope=tik.scope_ubuf)
    xf = t.Tensor("float32", (256,), name="xf", scope=tik.scope_ubuf)
    mu = t.Tensor("float16", (16,), name="mu", scope=tik.scope_ubuf)
    su = t.Tensor("float32", (8,), name="su", scope=tik.scope_ubuf)
    t.data_move(xu, x, 0, 1, 16, 0, 0)
    t.vec_reduce_max(128, mu, xu, xf, 2, 8)
    t.vec_conv(64, "", xf, xu, 4, 8, 4)
    t.vec_reduce_add(64, su, xf, xf, 4, 8)
    t.data_move(mx, mu, 0, 1, 1, 0, 0)
    t.data_move(sm, su, 0, 1, 1, 0, 0)
    t.BuildCCE("pieces", [x], [mx, sm])
    xs = np.random.default_rng(4).standard_normal(256).astype(np.float16)
    r = t.run({"x": xs})
    assert r.outputs["mx"][0] == xs.max()
    np.testing.assert_allclose(r.outputs["sm"][0], xs.astype(np.float32).sum(), rtol=1e-5)
    # reduce max: 512 B = 2 repeats, then 2 elements in 1 = 3; conv: 1 KiB of fp32 = 4
    # repeats; reduce add: 1 KiB = 4 repeats, then 4 elements in 1 = 5
    v = [(i.name, i.cycles) for i in r.instructions() if i.pipe == "V"]
    assert v == [("ReduceMax", 3), ("Cast", 4), ("ReduceSum", 5)]
    with pytest.raises(OperandError, match="vec_conv: unknown round_mode 'odd'"):
        t.vec_conv(64, "odd", xf, xu, 4, 8, 4)
    with pytest.raises(OperandError, match="vec_reduce_max: only contiguous"):
        t.vec_reduce_max(128, mu, xu, xf, 2, 16)
