"""``torch.npu.config.allow_internal_format``: private formats and TransData on or off."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch import nn

from msprof_py.adapter.tensors import storage_format
from msprof_py.device import SimulatedNpu, TaskLog, costmodel

PRIVATE = {"NC1HWC0", "FRACTAL_Z", "FRACTAL_NZ"}


@pytest.fixture
def internal_format(npu: SimulatedNpu) -> Iterator[None]:
    """Restore the flag after the test."""
    saved = torch.npu.config.allow_internal_format
    yield
    torch.npu.config.allow_internal_format = saved


def _train_step(log: TaskLog) -> tuple[list, torch.Tensor, list[torch.Tensor], list]:
    """One forward and backward of a conv+BN+ReLU block; the kernels, output, gradients and
    the storage formats the step left on the input and the parameters."""
    torch.manual_seed(0)
    block = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
    block = block.to("npu")
    x = torch.randn(2, 3, 8, 8).to("npu")
    start = len(log.tasks)
    out = block(x)
    out.sum().backward()
    kernels = [t for t in log.tasks[start:] if t.kind.value == "kernel"]
    held = [storage_format(t) for t in (x, out, block[0].weight)]
    grads = [p.grad.cpu() for p in block.parameters()]
    return kernels, out.detach().cpu(), grads, held


def test_the_flag_defaults_to_true_and_is_torch_npus(internal_format: None) -> None:
    import torch_npu

    assert torch.npu.config.allow_internal_format is True
    torch_npu.npu.config.allow_internal_format = False
    assert torch.npu.config.allow_internal_format is False
    with pytest.raises(TypeError, match="must be True or False, got 0"):
        torch.npu.config.allow_internal_format = 0


def test_without_internal_formats_tensors_stay_nd_and_no_transdata_runs(
    npu: SimulatedNpu, log: TaskLog, internal_format: None
) -> None:
    torch.npu.config.allow_internal_format = True
    on, out_on, grads_on, held_on = _train_step(log)
    torch.npu.config.allow_internal_format = False
    off, out_off, grads_off, held_off = _train_step(log)

    assert sum(t.op_type == "TransData" for t in on) >= 3  # input, weight, grads back to ND
    assert held_on[0][0] == "NC1HWC0" and held_on[2][0] == "FRACTAL_Z"
    assert any(PRIVATE & set(t.input_formats + t.output_formats) for t in on)

    assert not [t for t in off if t.op_type == "TransData"]
    assert held_off == [None, None, None]
    assert all(set(t.input_formats + t.output_formats) <= {"ND"} for t in off)
    # the same kernels otherwise, and the same values bit for bit
    assert [t.op_type for t in off] == [t.op_type for t in on if t.op_type != "TransData"]
    assert torch.equal(out_on, out_off)
    assert all(torch.equal(a, b) for a, b in zip(grads_on, grads_off, strict=True))

    # the convolution is costed on its plain bytes (the cost model has no ND penalty)
    (conv,) = [t for t in off if t.op_type == "Conv2D"]
    nbytes = (2 * 3 * 8 * 8 + 16 * 3 * 3 * 3 + 2 * 16 * 8 * 8) * 4
    expected = costmodel.matmul_cost(
        npu.spec, 2 * 8 * 8, 16, 3 * 3 * 3, batch=1, dtype="float32", bytes_moved=nbytes
    )
    assert conv.bytes == nbytes and conv.duration_ns == expected.duration_ns


def test_an_explicit_format_cast_still_converts(log: TaskLog, internal_format: None) -> None:
    import torch_npu

    torch.npu.config.allow_internal_format = False
    w = torch_npu.npu_format_cast(torch.randn(16, 3, 3, 3).to("npu"), "FRACTAL_Z")
    assert storage_format(w)[0] == "FRACTAL_Z"
    start = len(log.tasks)
    y = torch.nn.functional.conv2d(torch.randn(2, 3, 8, 8).to("npu"), w)
    kinds = [(t.op_type, t.output_formats) for t in log.tasks[start:] if t.kind.value == "kernel"]
    assert kinds[-2:] == [("TransData", ("ND",)), ("Conv2D", ("ND",))]
    assert storage_format(y) is None
