"""The npu autocast policy is torch.autocast("cuda")'s, op for op.

torch's CUDA autocast tables are read from torch itself: an op is in them when it has an
``AutocastCUDA`` kernel, and its category (lower precision, fp32, promote) is what that kernel
does to the dtypes of fake CUDA tensors (FakeTensorMode needs no GPU).
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from msprof_py.adapter import amp

aten = torch.ops.aten

#: in CUDA's tables but deliberately not in the npu policy: the recurrent ops run whole on the
#: host under CPU autocast (msprof_py.adapter.host_ops)
RECURRENT = {
    "lstm_cell",
    "gru_cell",
    "rnn_tanh_cell",
    "rnn_relu_cell",
    "_thnn_fused_lstm_cell",
    "_thnn_fused_gru_cell",
}


def cuda_autocast_ops() -> dict[str, list[str]]:
    """Base name -> overloads of every aten op with an AutocastCUDA kernel."""
    ops: dict[str, list[str]] = collections.defaultdict(list)
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith("aten::"):
            continue
        if torch._C._dispatch_has_kernel_for_dispatch_key(name, "AutocastCUDA"):
            base, _, overload = name[len("aten::") :].partition(".")
            ops[base].append(overload or "default")
    return ops


def _t(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(shape, device="cuda", dtype=dtype)


#: calls for ops whose schema the generic probe cannot fill (x: a tensor of the probed dtype)
RECIPES: dict[str, Callable[[torch.dtype], Any]] = {
    "convolution": lambda d: aten.convolution(
        _t((1, 2, 4, 4), d), _t((2, 2, 1, 1), d), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1
    ),
    "_convolution": lambda d: aten._convolution(
        _t((1, 2, 4, 4), d),
        _t((2, 2, 1, 1), d),
        None,
        [1, 1],
        [0, 0],
        [1, 1],
        False,
        [0, 0],
        1,
        False,
        False,
        True,
        True,
    ),
    "conv3d": lambda d: aten.conv3d(_t((1, 2, 4, 4, 4), d), _t((2, 2, 1, 1, 1), d)),
    "conv_transpose1d": lambda d: aten.conv_transpose1d(_t((1, 2, 4), d), _t((2, 2, 1), d)),
    "layer_norm": lambda d: aten.layer_norm(_t((2, 4), d), [4]),
    "native_layer_norm": lambda d: aten.native_layer_norm(_t((2, 4), d), [4], None, None, 1e-5),
    "rms_norm": lambda d: aten.rms_norm(_t((2, 4), d), [4]),
    "prelu": lambda d: aten.prelu(_t((1, 2, 4, 4), d), _t((2,), d)),
    "nll_loss": lambda d: aten.nll_loss(
        _t((2, 4), d), torch.zeros(2, dtype=torch.long, device="cuda")
    ),
    "logsumexp": lambda d: aten.logsumexp(_t((2, 4), d), [1]),
    "mv": lambda d: aten.mv(_t((4, 4), d), _t((4,), d)),
    "addmv": lambda d: aten.addmv(_t((4,), d), _t((4, 4), d), _t((4,), d)),
    "addbmm": lambda d: aten.addbmm(_t((4, 4), d), _t((2, 4, 4), d), _t((2, 4, 4), d)),
    "einsum": lambda d: aten.einsum("ij,jk->ik", [_t((4, 4), d), _t((4, 4), d)]),
    "upsample_nearest2d": lambda d: aten.upsample_nearest2d(_t((1, 2, 4, 4), d), [8, 8]),
    "upsample_bilinear2d": lambda d: aten.upsample_bilinear2d(_t((1, 2, 4, 4), d), [8, 8], False),
    "upsample_nearest1d": lambda d: aten.upsample_nearest1d(_t((1, 2, 4), d), [8]),
    "renorm": lambda d: aten.renorm(_t((2, 4), d), 2.0, 0, 1.0),
    "frobenius_norm": lambda d: aten.frobenius_norm(_t((2, 4), d), [1]),
    "scatter_add": lambda d: aten.scatter_add(
        _t((2, 4), d),
        1,
        torch.zeros(2, 4, dtype=torch.long, device="cuda"),
        _t((2, 4), d),
    ),
    "tensordot": lambda d: aten.tensordot(_t((4, 4), d), _t((4, 4), d), [1], [0]),
    "cross": lambda d: aten.cross(_t((2, 3), d), _t((2, 3), d)),
}


def _generic_args(schema: Any, shape: tuple[int, ...], dtype: torch.dtype) -> list | None:
    args: list[Any] = []
    for arg in schema.arguments:
        if arg.has_default_value():
            break
        kind = str(arg.type)
        if kind == "Tensor":
            args.append(_t(shape, dtype))
        elif kind == "Tensor[]":
            args.append([_t(shape, dtype)] * 2)
        elif kind.startswith(("int[", "SymInt[")):
            args.append([1] * max(1, len(shape) - 2))
        elif kind in ("int", "SymInt"):
            args.append(1)
        elif kind == "float":
            args.append(1.0)
        elif kind == "bool":
            args.append(False)
        elif kind == "Scalar":
            args.append(2.0)
        else:
            return None
    return args


def _output_dtypes(base: str, overloads: list[str]) -> dict[torch.dtype, torch.dtype] | None:
    """{input dtype: output dtype} of the op under CUDA autocast (fp16), None if not probed."""
    calls: list[Callable[[torch.dtype], Any]] = []
    if base in RECIPES:
        calls.append(RECIPES[base])
    for overload in overloads:
        op = getattr(getattr(aten, base), overload)
        for shape in ((4, 4), (2, 2, 4, 4), (4,), (2, 4, 4)):

            def call(d: torch.dtype, op: Any = op, shape: tuple[int, ...] = shape) -> Any:
                args = _generic_args(op._schema, shape, d)
                if args is None:
                    raise TypeError("schema not probeable")
                return op(*args)

            calls.append(call)
    for call in calls:
        try:
            found = {}
            for dtype in (torch.float32, torch.float16):
                out = call(dtype)
                found[dtype] = (out[0] if isinstance(out, (tuple, list)) else out).dtype
            return found
        except Exception:  # a probe that does not fit this op's schema: try the next
            continue
    return None


def torch_cuda_policy() -> tuple[dict[str, str], set[str]]:
    """(probed op -> "lower" | "fp32" | "promote", ops in the tables that were not probed)."""
    categories: dict[str, str] = {}
    unprobed: set[str] = set()
    with FakeTensorMode():
        torch.set_autocast_enabled("cuda", True)
        torch.set_autocast_dtype("cuda", torch.float16)
        try:
            for base, overloads in cuda_autocast_ops().items():
                if base in amp.BANNED:
                    categories[base] = "banned"
                    continue
                found = _output_dtypes(base, overloads)
                if found is None:
                    unprobed.add(base)
                elif found[torch.float32] == torch.float16:
                    categories[base] = "lower"
                elif found[torch.float16] == torch.float32:
                    categories[base] = "fp32"
                else:
                    categories[base] = "promote"  # fp16 in, fp16 out; fp32 in, fp32 out
        finally:
            torch.set_autocast_enabled("cuda", False)
    return categories, unprobed


@pytest.fixture(scope="module")
def cuda_policy() -> tuple[dict[str, str], set[str]]:
    return torch_cuda_policy()


def npu_policy() -> dict[str, str]:
    policy = {name: "lower" for name in amp.LOWER_PRECISION}
    policy.update({name: "fp32" for name in amp.FP32})
    policy.update({name: "promote" for name in amp.PROMOTE})
    policy.update({name: "banned" for name in amp.BANNED})
    return policy


def test_same_ops_as_cuda_autocast(cuda_policy: tuple[dict[str, str], set[str]]) -> None:
    ours = set(npu_policy())
    theirs = set(cuda_autocast_ops())
    assert "batch_norm" not in theirs and "batch_norm" not in ours
    assert ours == theirs - RECURRENT
    assert ours.isdisjoint(RECURRENT)


def test_same_category_as_cuda_autocast(cuda_policy: tuple[dict[str, str], set[str]]) -> None:
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
