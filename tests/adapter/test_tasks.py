"""Every op becomes device work with the right engine, and formats cost TransData."""

from __future__ import annotations

import torch
from torch import nn

from msprof_py.device import SimulatedNpu, TaskLog, TaskType, costmodel


def _kernels(log: TaskLog, start: int = 0) -> list:
    return [t for t in log.tasks[start:] if t.kind.value == "kernel"]


def test_matmul_runs_on_the_cube_with_the_roofline_duration(
    npu: SimulatedNpu, log: TaskLog
) -> None:
    a = torch.randn(1024, 512, device="npu", dtype=torch.float16)
    b = torch.randn(512, 256, device="npu", dtype=torch.float16)
    start = len(log.tasks)
    a @ b
    (mm,) = _kernels(log, start)
    assert (mm.name, mm.op_type, mm.task_type) == ("aten::mm", "MatMul", TaskType.AI_CORE)
    expected = costmodel.matmul_cost(
        npu.spec,
        1024,
        256,
        512,
        dtype="float16",
        bytes_moved=(1024 * 512 + 512 * 256 + 1024 * 256) * 2,
    )
    assert mm.duration_ns == expected.duration_ns
    assert mm.flops == 2 * 1024 * 512 * 256
    assert mm.input_shapes == ((1024, 512), (512, 256)) and mm.output_shapes == ((1024, 256),)
    assert mm.input_dtypes == ("float16", "float16")


def test_elementwise_and_reductions_run_on_the_vector_units(
    npu: SimulatedNpu, log: TaskLog
) -> None:
    x = torch.randn(4096, 1024, device="npu")
    start = len(log.tasks)
    (x + x).sum()
    add, total = _kernels(log, start)
    assert (add.op_type, add.task_type) == ("Add", TaskType.AI_VECTOR_CORE)
    assert (total.op_type, total.task_type) == ("ReduceSum", TaskType.AI_VECTOR_CORE)
    nbytes = 3 * 4096 * 1024 * 4
    assert add.bytes == nbytes
    # memory-bound: 48 MiB at the achievable 1.28 TB/s, plus 3 us of scheduling
    assert add.duration_ns == 3000 + round(nbytes / 1.28e12 * 1e9)
    assert total.start_ns >= add.end_ns  # same stream, in order


def test_ops_an_ai_core_would_not_run_go_to_the_ai_cpu(npu: SimulatedNpu, log: TaskLog) -> None:
    start = len(log.tasks)
    counts = torch.arange(10, device="npu")  # int64
    counts + counts
    torch.randn(8, device="npu", dtype=torch.float64).exp()
    torch.nonzero(torch.tensor([0, 1, 0, 2], device="npu"))
    torch.sort(torch.randn(16, device="npu"))
    float32 = torch.randn(64, device="npu").relu()
    by_op = {t.name: t.task_type for t in _kernels(log, start)}
    assert by_op["aten::add"] is TaskType.AI_CPU
    assert by_op["aten::exp"] is TaskType.AI_CPU
    assert by_op["aten::nonzero"] is TaskType.AI_CPU
    assert by_op["aten::sort"] is TaskType.AI_CPU
    assert by_op["aten::relu"] is TaskType.AI_VECTOR_CORE
    assert float32.shape == (64,)


def test_convolutions_keep_private_formats_and_pay_transdata(
    npu: SimulatedNpu, log: TaskLog
) -> None:
    torch.manual_seed(0)
    block = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU()).to("npu")
    x = torch.randn(2, 3, 8, 8, device="npu")
    start = len(log.tasks)
    out = block(x)
    names = [(t.op_type, t.input_formats, t.output_formats) for t in _kernels(log, start)]
    assert names[0] == ("TransData", ("ND",), ("NC1HWC0",))  # the input, to 5HD
    assert names[1] == ("TransData", ("ND",), ("FRACTAL_Z",))  # the weight, to FRACTAL_Z
    conv = next(t for t in _kernels(log, start) if t.op_type == "Conv2D")
    assert conv.task_type is TaskType.AI_CORE
    assert conv.input_formats[:2] == ("NC1HWC0", "FRACTAL_Z")
    bn = next(t for t in _kernels(log, start) if t.name == "aten::native_batch_norm")
    assert bn.input_formats[0] == "NC1HWC0" and bn.output_formats[0] == "NC1HWC0"
    # C = 3 pads to C0 = 16 channels: the TransData writes the padded layout
    assert log.tasks[start].bytes == 2 * 3 * 8 * 8 * 4 + 2 * 1 * 8 * 8 * 8 * 4
    # the weight keeps FRACTAL_Z: a second forward converts only the new input
    start = len(log.tasks)
    block(torch.randn(2, 3, 8, 8, device="npu"))
    assert [t.output_formats for t in _kernels(log, start) if t.op_type == "TransData"] == [
        ("NC1HWC0",)
    ]
    # data leaving the device goes back to ND first
    start = len(log.tasks)
    out.cpu()
    transfer = [t.op_type for t in log.tasks[start:]]
    assert transfer == ["TransData", "MEMCPY_D2H"]


def test_conv_backward_launches_input_and_filter_gradients(npu: SimulatedNpu, log: TaskLog) -> None:
    conv = nn.Conv2d(8, 16, 3).to("npu")
    x = torch.randn(2, 8, 10, 10, device="npu", requires_grad=True)
    out = conv(x).sum()
    start = len(log.tasks)
    out.backward()
    types = [t.op_type for t in _kernels(log, start)]
    assert {"Conv2DBackpropInput", "Conv2DBackpropFilter", "BiasAddGrad"} <= set(types)
    filt = next(t for t in log.tasks[start:] if t.op_type == "Conv2DBackpropFilter")
    assert filt.flops == 2 * 16 * (8 * 3 * 3) * (2 * 8 * 8)


def test_private_formats_hold_padded_device_memory(npu: SimulatedNpu) -> None:
    conv = nn.Conv2d(3, 4, 1, bias=False).to("npu")
    base = torch.npu.memory_allocated()
    x = torch.randn(2, 3, 8, 8, device="npu")  # 1536 B logical
    assert torch.npu.memory_allocated() - base == 1536
    y = conv(x)
    # x and y are now held in NC1HWC0: C pads to C0 = 8 for fp32, 2*1*8*8*8*4 = 4096 B each
    # (the FRACTAL_Z weight still fits the 512 B block it had)
    assert torch.npu.memory_allocated() - base == 4096 + 4096
    del y


def test_matmuls_read_fractal_nz_weights_without_converting(
    npu: SimulatedNpu, log: TaskLog
) -> None:
    import torch_npu

    weight = torch_npu.npu_format_cast(torch.randn(64, 32, device="npu"), 29)
    x = torch.randn(8, 32, device="npu")
    start = len(log.tasks)
    torch.nn.functional.linear(x, weight)
    x @ weight.t()
    assert [t.op_type for t in _kernels(log, start)] == ["MatMul", "MatMul"]
