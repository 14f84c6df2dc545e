"""Shapes-only fast shape functions agree with torch's meta kernels; casts keep formats."""

from __future__ import annotations

import pytest
import torch

from msprof_py.adapter import meta_shapes
from msprof_py.device import SimulatedNpu

aten = torch.ops.aten


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_shapes_match_torch_meta(dtype: torch.dtype, training: bool) -> None:
    x = torch.empty(4, 6, 5, 5, device="meta", dtype=dtype)
    w = torch.empty(6, device="meta")
    stats = [torch.empty(6, device="meta") for _ in range(2)]
    for op in (aten.native_batch_norm.default, aten._native_batch_norm_legit.default):
        want = op(x, w, w, *stats, training, 0.1, 1e-5)
        got = meta_shapes.FAST[op](x, w, w, *stats, training, 0.1, 1e-5)
        assert [(t.shape, t.dtype) for t in got] == [(t.shape, t.dtype) for t in want]


@pytest.mark.parametrize("mask", [[True, True, True], [True, False, False], [False, True, True]])
def test_batch_norm_backward_shapes_match_torch_meta(mask: list[bool]) -> None:
    x = torch.empty(4, 6, 5, 5, device="meta", dtype=torch.float16)
    w = torch.empty(6, device="meta")
    stats = [torch.empty(6, device="meta") for _ in range(4)]
    op = aten.native_batch_norm_backward.default
    want = op(x, x, w, *stats, True, 1e-5, mask)
    got = meta_shapes.FAST[op](x, x, w, *stats, True, 1e-5, mask)
    for g, t in zip(got, want, strict=True):
        if not isinstance(t, torch.Tensor) or g is None:
            assert g is None or t is None or t.numel() == 0
            continue
        assert (g.shape, g.dtype) == (t.shape, t.dtype)


def test_a_dtype_cast_keeps_nc1hwc0(npu: SimulatedNpu) -> None:
    from msprof_py.adapter.tensors import storage_format
    from msprof_py.device import TaskLog

    conv = torch.nn.Conv2d(16, 16, 1).to("npu")
    y = conv(torch.randn(2, 16, 4, 4, device="npu"))
    assert storage_format(y) == ("NC1HWC0", (2, 16, 4, 4))
    log = TaskLog()
    npu.subscribe(log)
    try:
        h = y.half()
    finally:
        npu.unsubscribe(log)
    assert storage_format(h) == ("NC1HWC0", (2, 16, 4, 4))
    types = [t.op_type for t in log.tasks]
    assert "TransData" not in types and types.count("Cast") == 1
    # the Cast moves the padded bytes: C = 16 is one C0 block of 8 (fp32) twice; fp16 C0 = 16
    cast = next(t for t in log.tasks if t.op_type == "Cast")
    assert cast.bytes == 2 * 16 * 4 * 4 * 4 + 2 * 16 * 4 * 4 * 2


def test_bf16_matmul_on_the_910a_is_refused_and_int_matmul_costs_its_flops() -> None:
    from msprof_py.adapter.opcost import TensorInfo, UnsupportedDtypeError, op_tasks
    from msprof_py.device.spec import DeviceSpec

    a910 = DeviceSpec.preset("ascend910a")
    bf16 = [TensorInfo((64, 64), torch.bfloat16)] * 2
    with pytest.raises(UnsupportedDtypeError, match="bfloat16 is not supported on Ascend910A"):
        op_tasks(a910, "mm", bf16, [TensorInfo((64, 64), torch.bfloat16)])
    assert op_tasks(DeviceSpec.preset("ascend910b"), "mm", bf16, [bf16[0]])[0].op_type == "MatMul"
    # an int32 matmul has no cube fractal: AI CPU, costed by its 2mnk FLOPs
    ints = [TensorInfo((256, 256), torch.int32)] * 2
    (kernel,) = op_tasks(a910, "mm", ints, [TensorInfo((256, 256), torch.int32)])
    assert kernel.cost.task_type.value == "AI_CPU"
    assert kernel.cost.duration_ns == 30_000 + round(2 * 256**3 / 4e9 * 1e9)


def test_fusion_attention_is_gated_to_a2_class_chips() -> None:
    from msprof_py.adapter.torch_npu.fused import require_a2
    from msprof_py.device.spec import DeviceSpec

    require_a2(DeviceSpec.preset("ascend910b"), "npu_fusion_attention")  # A2: accepted
    for name in ("ascend910a", "ascend310p"):
        spec = DeviceSpec.preset(name)
        with pytest.raises(RuntimeError, match=f"only on Atlas A2/A3.*{spec.soc_version}"):
            require_a2(spec, "npu_fusion_attention")
