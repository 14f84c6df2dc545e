"""The npu autocast policy is torch.autocast("cuda")'s, op for op.

torch's CUDA autocast tables are read from torch itself (tests/cuda_autocast.py): an op is in
them when it has an ``AutocastCUDA`` kernel, and its category (lower precision, fp32, promote)
is what that kernel does to the dtypes of fake CUDA tensors (FakeTensorMode needs no GPU).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from cuda_autocast import RECURRENT, cuda_autocast_ops, torch_cuda_policy

from msprof_py.adapter import amp

aten = torch.ops.aten


@pytest.fixture(scope="module")
def cuda_policy() -> tuple[dict[str, str], frozenset[str]]:
    return torch_cuda_policy()


def npu_policy() -> dict[str, str]:
    policy = {name: "lower" for name in amp.LOWER_PRECISION}
    policy.update({name: "fp32" for name in amp.FP32})
    policy.update({name: "promote" for name in amp.PROMOTE})
    policy.update({name: "banned" for name in amp.BANNED})
    return policy


def test_same_ops_as_cuda_autocast(cuda_policy: tuple[dict[str, str], frozenset[str]]) -> None:
    ours = set(npu_policy())
    theirs = set(cuda_autocast_ops())
    assert "batch_norm" not in theirs and "batch_norm" not in ours
    assert ours == theirs - RECURRENT
    assert ours.isdisjoint(RECURRENT)


def test_same_category_as_cuda_autocast(cuda_policy: tuple[dict[str, str], frozenset[str]]) -> None:
    categories, _unprobed = cuda_policy
    ours = npu_policy()
    assert len(categories) >= 80  # most ops are probed; the rest are checked for membership
    mismatched = {
        op: (ours.get(op), cat)
        for op, cat in categories.items()
        if op not in RECURRENT and ours.get(op) != cat
    }
    assert mismatched == {}
    for op in ("mm", "convolution", "layer_norm", "softmax", "addcmul", "upsample_nearest2d"):
        assert op in categories  # the categories that matter are really probed


def test_batch_norm_stays_in_its_input_dtype(npu: Any) -> None:
    bn = torch.nn.BatchNorm2d(4).to("npu")
    x = torch.randn(2, 4, 3, 3, device="npu")
    with torch.autocast("npu", dtype=torch.float16):
        h = torch.nn.functional.conv2d(x, torch.randn(4, 4, 1, 1, device="npu"))
        assert h.dtype == torch.float16
        assert bn(h).dtype == torch.float16


def test_binary_cross_entropy_is_refused_under_autocast(npu: Any) -> None:
    p = torch.rand(4, device="npu")
    with torch.autocast("npu", dtype=torch.float16), pytest.raises(RuntimeError, match="unsafe"):
        torch.nn.functional.binary_cross_entropy(p, p)
