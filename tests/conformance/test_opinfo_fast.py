"""A representative subset of PyTorch's OpInfo database: npu gives bitwise what CPU gives.

Every op runs its sample inputs (the first MAX_SAMPLES of each case) forward in float32,
float16 and bfloat16 (where CPU supports them) and backward in float32. A case may fail only
if known_differences.yaml lists it, and a listed case must still fail (so the list stays
current). The whole database runs in test_opinfo_full.py (slow).
"""

from __future__ import annotations

import pytest
from opinfo_runner import op_db, run_op, stale, unexpected

from msprof_py.device import SimulatedNpu

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

FAST_OPS = (
    # elementwise unary
    "abs",
    "neg",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "sigmoid",
    "tanh",
    "sin",
    "erf",
    "sgn",
    "clamp",
    # elementwise binary and ternary
    "add",
    "sub",
    "mul",
    "div.no_rounding_mode",
    "pow",
    "maximum",
    "eq",
    "addcmul",
    "where",
    # reductions and scans
    "sum",
    "mean",
    "amax",
    "argmax",
    "var",
    "logsumexp",
    "cumsum",
    "max.reduction_with_dim",
    "linalg.vector_norm",
    # matmul and linalg basics
    "mm",
    "bmm",
    "matmul",
    "addmm",
    "einsum",
    "linalg.inv",
    # indexing, scatter, gather
    "index_select",
    "gather",
    "scatter",
    "scatter_add",
    "index_add",
    "index_put",
    "masked_fill",
    "__getitem__",
    "nonzero",
    # shape ops
    "reshape",
    "view",
    "permute",
    "transpose",
    "expand",
    "repeat",
    "flip",
    "roll",
    "split",
    "tril",
    "cat",
    "stack",
    # nn.functional
    "nn.functional.linear",
    "nn.functional.conv1d",
    "nn.functional.conv2d",
    "nn.functional.conv_transpose2d",
    "nn.functional.max_pool2d",
    "nn.functional.avg_pool2d",
    "nn.functional.adaptive_avg_pool2d",
    "nn.functional.batch_norm",
    "nn.functional.layer_norm",
    "nn.functional.group_norm",
    "nn.functional.rms_norm",
    "nn.functional.cross_entropy",
    "nn.functional.nll_loss",
    "nn.functional.mse_loss",
    "nn.functional.binary_cross_entropy_with_logits",
    "nn.functional.relu",
    "nn.functional.gelu",
    "nn.functional.silu",
    "nn.functional.leaky_relu",
    "nn.functional.dropout",
    "nn.functional.embedding",
    "nn.functional.pad.constant",
    "nn.functional.interpolate.bilinear",
    "nn.functional.one_hot",
    "softmax",
    "log_softmax",
    # sorting
    "sort",
    "topk",
    # factories and random ops
    "arange",
    "zeros_like",
    "full",
    "bernoulli",
    "randn_like",
)

#: the first samples of each case (a few ops have hundreds: max_pool2d has 1440); the slow
#: suite runs them all
MAX_SAMPLES = 16


@pytest.mark.parametrize("name", FAST_OPS)
def test_op_matches_cpu_bitwise(npu: SimulatedNpu, name: str) -> None:
    verdicts = run_op(op_db()[name], max_samples=MAX_SAMPLES, tracked=False)
    assert any(v.status == "pass" for v in verdicts), [f"{v.key}: {v.detail}" for v in verdicts]
    failures = unexpected(verdicts)
    assert not failures, failures
    listed = stale(verdicts)
    assert not listed, f"listed in known_differences.yaml but no longer failing: {listed}"
