"""``.to()`` keeps strides as CPU and CUDA do, so CPU kernels take the same path on npu.

A dtype cast of a permuted (channels-last) tensor used to come out contiguous on npu, and a
depthwise fp16 convolution then ran CPU's contiguous kernel instead of its channels-last one:
one ulp off CPU (timm's ConvNeXt under autocast).
"""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from msprof_py.device import SimulatedNpu


def _channels_last_view(device: str) -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(2, 6, 5, 8).to(device).permute(0, 3, 1, 2)  # NHWC memory, NCHW shape


@pytest.mark.parametrize(
    "convert",
    [
        lambda t: t.to(torch.float16),
        lambda t: t.to(torch.bfloat16),
        lambda t: t.to("npu"),
        lambda t: t.cpu(),
        lambda t: t[:, :, :, ::2].to(torch.float16),  # not dense: channels-last suggested
        lambda t: t.to(torch.float16, memory_format=torch.contiguous_format),
    ],
)
def test_conversions_keep_strides_like_cpu(npu: SimulatedNpu, convert) -> None:
    cpu, on_npu = _channels_last_view("cpu"), _channels_last_view("npu")
    want, got = convert(cpu), convert(on_npu)
    assert got.stride() == want.stride()
    assert torch.equal(got.cpu(), want.cpu())


def test_transposed_matrix_to_npu_keeps_its_strides(npu: SimulatedNpu) -> None:
    m = torch.randn(3, 4)
    assert m.t().to("npu").stride() == m.t().stride() == (1, 4)
    assert m[:, ::2].to("npu").stride() == (2, 1)  # not dense: contiguous, as on CPU


def test_fp16_depthwise_convolution_of_a_channels_last_input_equals_cpu(
    npu: SimulatedNpu,
) -> None:
    torch.manual_seed(0)
    weight = torch.randn(8, 1, 7, 7)
    cpu = F.conv2d(_channels_last_view("cpu").half(), weight.half(), padding=3, groups=8)
    got = F.conv2d(_channels_last_view("npu").half(), weight.half().to("npu"), padding=3, groups=8)
    assert got.stride() == cpu.stride()
    assert torch.equal(got.cpu(), cpu)
