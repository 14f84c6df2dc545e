"""Multi-tensor (``_foreach_*``) ops as torch_npu runs them.

PyTorch has no npu kernels for the ``_foreach_*`` ops: left alone they run as their
CompositeExplicitAutograd "slow" kernels, one npu op per tensor. torch_npu's op-plugin gives
them kernels of its own on chips from the 910B on: when PyTorch's ``can_use_fast_route``
holds (every tensor on one device, of one dtype, dense, the tensors at each list index of
the same sizes and strides, no scalar that would promote the dtype) and the dtype has an
``aclnnForeach*`` kernel, the op is one host op launching one multi-tensor kernel per chunk of
the lists (24 tensors of an in-place op over two lists, 16 out of place ...; its
``_split_and_exec_npu_cmd_*`` helpers; ``_foreach_norm`` only for orders 1 and 2). Otherwise it
takes PyTorch's per-tensor loop (the "slow route").

:func:`register` gives every ``_foreach_*`` op that has such a kernel in op-plugin
(:data:`KERNELS`) a PrivateUse1 kernel doing the same: the fast route runs the whole op
through the backend (the host computes it with the CPU's kernel on the host views, which is
PyTorch's per-tensor loop, so values are bitwise those of the slow route), the slow route
calls the composite. :func:`msprof_py.device.costmodel.foreach_chunks` says how the lists split
into kernels.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from msprof_py.adapter import runtime
from msprof_py.adapter.tensors import dense_non_overlapping, is_npu_device

PREFIX = "_foreach_"
#: dtypes the aclnnForeach kernels take (int32 only for some ops: left on the slow route)
FAST_DTYPES = frozenset({torch.float32, torch.float16, torch.bfloat16})
_SLOW_ROUTE = torch._C.DispatchKey.CompositeExplicitAutograd
#: op-plugin runs a norm's multi-tensor kernel for orders 1 and 2 only
NORM = "aten::_foreach_norm"


_UNARY = frozenset({""})
_BINARY = frozenset({"List", "Scalar", "ScalarList"})
# fmt: off
_UNARY_OPS = (
    "abs", "acos", "asin", "atan", "cos", "cosh", "erf", "erfc", "exp", "expm1", "log", "log10",
    "log1p", "log2", "neg", "reciprocal", "ceil", "floor", "frac", "round", "trunc", "sigmoid",
    "sign", "sin", "sinh", "sqrt", "tan", "tanh", "zero", "copy",
)
# fmt: on
#: the ops op-plugin gives multi-tensor kernels (``aclnnForeach*``), by name without
#: ``_foreach_`` and the in-place ``_``, with the overloads it registers them for; the others
#: (``_foreach_mul.Tensor``, as gradient clipping calls it, ``clamp_min``, ``rsqrt``, ``max``,
#: the ``out`` overloads ...) always run as PyTorch's per-tensor loop
KERNELS: dict[str, frozenset[str]] = {
    **dict.fromkeys(_UNARY_OPS, _UNARY),
    **dict.fromkeys(("add", "sub", "mul", "div", "maximum", "minimum"), _BINARY),
    **dict.fromkeys(("addcdiv", "addcmul"), frozenset({"Scalar", "ScalarList", "Tensor"})),
    "lerp": frozenset({"List", "Scalar"}),
    "pow": _BINARY | {"ScalarAndTensor"},
    "norm": frozenset({"Scalar"}),
}


def has_kernel(name: str) -> bool:
    """Whether foreach op overload ``name`` (``"_foreach_add_.List"``) has an op-plugin
    multi-tensor kernel."""
    packet, _, overload = name.partition(".")
    base = packet.removeprefix(PREFIX).removesuffix("_")
    return overload in KERNELS.get(base, ())


def is_foreach(base: str) -> bool:
    """Whether ATen op ``base`` (``"_foreach_add_"``) is a multi-tensor op."""
    return base.startswith(PREFIX)


def _is_tensor_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and isinstance(value[0], torch.Tensor)


def tensor_lists(args: Sequence[Any]) -> list[Sequence[torch.Tensor]]:
    """The tensor-list arguments of a foreach call, in order."""
    return [a for a in args if _is_tensor_list(a)]


def count(args: Sequence[Any]) -> int:
    """Tensors per list of a foreach call (0 without a tensor list)."""
    return next((len(a) for a in args if _is_tensor_list(a)), 0)


def _promotes(value: Any, floating: bool) -> bool:
    """Whether scalar ``value`` beside tensors of the call's dtype would change it."""
    if isinstance(value, complex):
        return True
    return isinstance(value, float) and not floating


def fast_route(args: Sequence[Any], kwargs: dict[str, Any], op: str = "") -> bool:
    """Whether torch_npu would run this call of ``op`` (``"aten::_foreach_norm"`` ...) as
    multi-tensor kernels (see the module doc; a norm only of order 1 or 2)."""
    state = runtime.STATE
    if state is None or not state.npu.spec.a2_class:
        return False
    if op == NORM:
        order = args[1] if len(args) > 1 else kwargs.get("ord", 2)
        if isinstance(order, bool) or order not in (1, 2):
            return False
    lists = tensor_lists(args)
    if not lists:
        return False
    dtype = lists[0][0].dtype
    if dtype not in FAST_DTYPES:
        return False
    first = lists[0]
    n = len(first)
    for items in lists:
        if len(items) != n:
            return False
    for i in range(n):
        t = first[i]
        if t.dtype is not dtype or not is_npu_device(t.device) or not _dense(t):
            return False
        shape, stride = t.shape, t.stride()
        for items in lists[1:]:
            u = items[i]
            if (
                u.dtype is not dtype
                or not is_npu_device(u.device)
                or u.shape != shape
                or u.stride() != stride
            ):
                return False
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):  # a scalar tensor: one npu value of the dtype
            if value.dtype is not dtype or value.numel() != 1 or not is_npu_device(value.device):
                return False
        elif isinstance(value, (list, tuple)) and not _is_tensor_list(value):
            if any(_promotes(v, dtype.is_floating_point) for v in value):
                return False
        elif _promotes(value, dtype.is_floating_point):
            return False
    return True


def _dense(t: torch.Tensor) -> bool:
    """Non-overlapping and dense, as the multi-tensor kernels need (contiguous in some order
    of dimensions; the common layout checked directly)."""
    return t.is_contiguous() or dense_non_overlapping(t.shape, t.stride())


def kernel_for(op: torch._ops.OpOverload, whole: Callable[..., Any]) -> Callable[..., Any]:
    """The PrivateUse1 kernel of foreach op ``op``: ``whole(op, ...)`` on the fast route, the
    per-tensor composite otherwise."""
    slow = op._op_dk
    name = op._schema.name

    def kernel(*args: Any, **kwargs: Any) -> Any:
        if fast_route(args, kwargs, name):
            return whole(op, *args, **kwargs)
        return slow(_SLOW_ROUTE, *args, **kwargs)

    return kernel


def op_names() -> list[str]:
    """The ``_foreach_*`` op overloads with a multi-tensor kernel (``"_foreach_add_.List"``
    ...): the ones that get a route."""
    names = [
        name[len("aten::") :]
        for name in torch._C._dispatch_get_all_op_names()
        if name.startswith("aten::" + PREFIX)
    ]
    return [name for name in names if has_kernel(name)]


def register(impl: torch.library.Library, whole: Callable[..., Any], native: Any) -> None:
    """Give every ``_foreach_*`` op with a multi-tensor kernel (:func:`op_names`; the others
    keep their per-tensor composite) its PrivateUse1 kernel: the compiled one of ``native``
    (the per-op path's module, which checks the route in C++) or else :func:`kernel_for`,
    registered in ``impl`` (an aten IMPL)."""
    names = op_names()
    if native is not None:
        native.install_foreach(names)
        return
    for short in names:
        packet, _, overload = short.partition(".")
        op = getattr(getattr(torch.ops.aten, packet), overload or "default")
        impl.impl(short, kernel_for(op, whole), "PrivateUse1")
