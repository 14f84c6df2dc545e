"""npu_quant_matmul / npu_trans_quant_param: int8 cube cost, integer numerics, argument checks."""

from __future__ import annotations

import struct

import pytest
import torch

from msprof_py.device import TaskLog, TaskType, costmodel
from msprof_py.device.spec import DeviceSpec

B910 = DeviceSpec.preset("ascend910b")
EFF, BLOCK, CLOCK = 0.99, 3400, 1.8e9  # the preset's MMAD efficiency, block overhead, clock


@pytest.fixture(scope="module")
def qops(npu):
    from msprof_py.adapter.torch_npu import quant

    return quant


def test_int8_peak_is_twice_fp16_from_the_fractal() -> None:
    assert B910.cube_fractal("int8") == (16, 32, 16)
    assert B910.cube_peak_flops("int8") == 24 * 16 * 32 * 16 * 2 * CLOCK  # 707.8 TOPS
    assert B910.cube_peak_flops("int8") == 2 * B910.cube_peak_flops("float16")


def test_4096_cubed_int8_matmul_by_hand() -> None:
    cost = costmodel.matmul_cost(B910, 4096, 4096, 4096, dtype="int8", out_dtype="float16")
    tiling = costmodel.gemm_tiling(B910, 4096, 4096, 4096, dtype="int8")
    assert (tiling.tile_m, tiling.tile_n, tiling.tiles) == (128, 256, 512)
    # one K step (k0 = 32): MMAD 8 x 16 = 128 cycles; MTE2 (128 + 256) x 32 x 1 B / 109.95 = 111.8
    assert tiling.step_cycles == 128
    block = 4096 // 32 * 128 / EFF + BLOCK  # 128 K steps: half the fp16 block's
    assert cost.cube_ns == pytest.approx(22 * block / CLOCK * 1e9)
    fp16 = costmodel.matmul_cost(B910, 4096, 4096, 4096, dtype="float16")
    assert 1.8 < fp16.cube_ns / cost.cube_ns < 2.0  # the fixed block overhead stays
    # operands 1 byte each, output fp16
    assert cost.bytes == 2 * 4096 * 4096 + 4096 * 4096 * 2


def _fp32_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def test_trans_quant_param_packs_scale_and_offset_bits(qops, log: TaskLog) -> None:
    scale = torch.tensor([1.0, 0.1, -3.3e-4], dtype=torch.float32)
    offset = torch.tensor([-1.4, 300.0, 7.5], dtype=torch.float32)
    words = qops.npu_trans_quant_param(scale.npu(), offset.npu()).cpu()
    assert words.dtype == torch.int64 and words.shape == (3,)
    for w, s, o in zip(words.tolist(), scale.tolist(), (-1, 255, 8), strict=True):
        assert w & 0xFFFFFFFF == _fp32_bits(s) & 0xFFFFE000
        assert (w >> 46) & 1 == 1
        assert (w >> 37) & 0x1FF == o & 0x1FF
    assert [t.op_type for t in log.kernels()] == ["TransQuantParamV2"]


def _reference(x1, x2, s, o=None, bias=None):
    """Integer matmul, int32 bias, 19-bit scale, as the docstring states (independent code)."""
    acc = (x1.long() @ x2.long()).to(torch.int32)
    if bias is not None:
        acc = acc + bias
    bits = torch.tensor([_fp32_bits(v) & 0xFFFFE000 for v in s.tolist()], dtype=torch.int64)
    s19 = bits.to(torch.int32).view(torch.float32)
    y = acc.float() * s19
    if o is None:
        return y.half()
    return torch.round(y + torch.round(o).clamp(-256, 255)).clamp(-128, 127).to(torch.int8)


def _operands(m=33, k=200, n=48, batch=(2,)):
    g = torch.Generator().manual_seed(0)
    x1 = torch.randint(-128, 128, (*batch, m, k), dtype=torch.int8, generator=g)
    x2 = torch.randint(-128, 128, (k, n), dtype=torch.int8, generator=g)
    scale = torch.rand(n, generator=g) * 1e-3
    return x1, x2, scale


def test_fp16_output_equals_integer_arithmetic_bitwise(qops, log: TaskLog) -> None:
    x1, x2, scale = _operands()
    bias = torch.randint(-1000, 1000, (48,), dtype=torch.int32)
    words = qops.npu_trans_quant_param(scale.npu())
    out = qops.npu_quant_matmul(
        x1.npu(), x2.npu(), words, bias=bias.npu(), output_dtype=torch.float16
    )
    assert out.dtype == torch.float16 and out.shape == (2, 33, 48)
    assert torch.equal(out.cpu(), _reference(x1, x2, scale, bias=bias))
    # a float32 scale is converted the same way
    direct = qops.npu_quant_matmul(
        x1.npu(), x2.npu(), scale.npu(), bias=bias.npu(), output_dtype=torch.float16
    )
    assert torch.equal(direct.cpu(), out.cpu())
    mm = [t for t in log.kernels() if t.op_type == "QuantBatchMatmulV3"]
    assert len(mm) == 2 and mm[0].task_type is TaskType.AI_CORE
    assert mm[0].input_dtypes[:2] == ("int8", "int8") and mm[0].output_dtypes == ("float16",)
    # the costed kernel: a (2 x 33) x 200 x 48 int8 GEMM (2-D x2 folds the batch into rows)
    nbytes = x1.numel() + x2.numel() + 2 * 33 * 48 * 2 + words.numel() * 8 + bias.numel() * 4
    cost = costmodel.matmul_cost(
        B910, 66, 48, 200, dtype="int8", out_dtype="float16", bytes_moved=nbytes
    )
    assert mm[0].end_ns - mm[0].start_ns == cost.duration_ns


def test_int8_output_with_offset_saturates_like_integer_arithmetic(qops) -> None:
    x1, x2, scale = _operands(batch=())
    scale = scale * 20  # large enough to saturate some outputs
    offset = torch.full((48,), 3.6)
    out = qops.npu_quant_matmul(x1.npu(), x2.npu(), scale.npu(), offset=offset.npu()).cpu()
    ref = _reference(x1, x2, scale, offset)
    assert out.dtype == torch.int8 and torch.equal(out, ref)
    assert (out == 127).any() and (out == -128).any()


def test_bf16_output_with_pertoken_scale_and_bias(qops) -> None:
    x1, x2, scale = _operands(batch=())
    pertoken = torch.rand(33) + 0.5
    bias = torch.randn(48).bfloat16()
    out = qops.npu_quant_matmul(
        x1.npu(),
        x2.npu(),
        scale.npu(),
        pertoken_scale=pertoken.npu(),
        bias=bias.npu(),
        output_dtype=torch.bfloat16,
    ).cpu()
    acc = (x1.long() @ x2.long()).float()
    ref = (acc * scale * pertoken.unsqueeze(-1) + bias.float()).bfloat16()
    assert torch.equal(out, ref)


BAD = {
    "x1 must be int8": lambda x1, x2, s: dict(x1=x1.half()),
    "k differs": lambda x1, x2, s: dict(x2=x2[:100]),
    "2 to 6 dims": lambda x1, x2, s: dict(x1=x1[0, 0]),
    "scale must be 1-D with 1 or n=48": lambda x1, x2, s: dict(scale=s[:5]),
    "scale must be float32 or bfloat16 for torch.bfloat16": lambda x1, x2, s: dict(
        scale=s.long(), output_dtype=torch.bfloat16
    ),
    "offset is only allowed with int8": lambda x1, x2, s: dict(
        offset=s, output_dtype=torch.float16
    ),
    "pertoken_scale must be 1-D with m=33": lambda x1, x2, s: dict(
        pertoken_scale=s, output_dtype=torch.bfloat16
    ),
    "bias must be int32 for torch.float16": lambda x1, x2, s: dict(
        bias=s, output_dtype=torch.float16
    ),
    "output_dtype must be": lambda x1, x2, s: dict(output_dtype=torch.float32),
    "must be an npu tensor": lambda x1, x2, s: dict(x1=x1.cpu()),
    "int4 packed": lambda x1, x2, s: dict(x1=x1.int(), x2=x2.int()),
}


@pytest.mark.parametrize("expected", list(BAD))
def test_bad_arguments_give_one_line_errors(qops, expected: str) -> None:
    x1, x2, scale = _operands()
    args = dict(x1=x1.npu(), x2=x2.npu(), scale=scale.npu())
    args |= BAD[expected](args["x1"], args["x2"], args["scale"])
    x1_, x2_, s_ = args.pop("x1"), args.pop("x2"), args.pop("scale")
    with pytest.raises(RuntimeError) as info:
        qops.npu_quant_matmul(x1_, x2_, s_, **args)
    text = str(info.value)
    assert expected in text and "\n" not in text and text.startswith("npu_quant_matmul: ")


def test_trans_quant_param_rejects_bad_scales(qops) -> None:
    with pytest.raises(RuntimeError, match="scale must be float32"):
        qops.npu_trans_quant_param(torch.ones(4, dtype=torch.float16).npu())
    with pytest.raises(RuntimeError, match="offset must have 1 or 4 elements"):
        qops.npu_trans_quant_param(torch.ones(4).npu(), torch.ones(3).npu())


def test_the_torch_npu_shim_exports_both(npu) -> None:
    import torch_npu

    assert callable(torch_npu.npu_quant_matmul) and callable(torch_npu.npu_trans_quant_param)
