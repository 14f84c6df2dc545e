"""torch.autocast("cuda")'s policy read from torch itself, and that policy run on CPU.

:func:`torch_cuda_policy` reads CUDA's autocast tables: an op is in them when it has an
``AutocastCUDA`` kernel, and its category (lower precision, fp32, promote) is what that kernel
does to the dtypes of fake CUDA tensors (FakeTensorMode needs no GPU).

:class:`CudaPolicyOnCpu` is a CPU reference for whole-model AMP runs: inside it,
``torch.autocast("cpu")`` applies CUDA's tables instead of CPU's (CPU's own autocast kernels are
replaced for the duration: ops CUDA does not list fall through, ops it lists get a kernel of
their category, written here from the C++ cast policies of ``ATen/autocast_mode.h``). Training a
model on CPU inside it gives what a CUDA-policy device computing with CPU kernels must give,
without sharing code with ``msprof_py.adapter.amp``.
"""

from __future__ import annotations

import collections
import functools
import warnings
from collections.abc import Callable
from types import TracebackType
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

aten = torch.ops.aten

#: in CUDA's tables but run by the npu under CPU autocast (msprof_py.adapter.host_ops runs the
#: recurrent ops whole on the host); the CPU reference keeps CPU's kernels for them
RECURRENT = frozenset(
    {
        "lstm_cell",
        "gru_cell",
        "rnn_tanh_cell",
        "rnn_relu_cell",
        "_thnn_fused_lstm_cell",
        "_thnn_fused_gru_cell",
    }
)
#: CUDA refuses these under autocast (unsafe in fp16)
BANNED = frozenset({"binary_cross_entropy"})


def autocast_ops(key: str) -> dict[str, list[str]]:
    """Base name -> overloads of every aten op with a kernel for dispatch key ``key``."""
    ops: dict[str, list[str]] = collections.defaultdict(list)
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith("aten::"):
            continue
        if torch._C._dispatch_has_kernel_for_dispatch_key(name, key):
            base, _, overload = name[len("aten::") :].partition(".")
            ops[base].append(overload or "default")
    return ops


def cuda_autocast_ops() -> dict[str, list[str]]:
    """Base name -> overloads of every aten op with an AutocastCUDA kernel."""
    return autocast_ops("AutocastCUDA")


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


@functools.cache
def torch_cuda_policy() -> tuple[dict[str, str], frozenset[str]]:
    """(probed op -> "lower" | "fp32" | "promote" | "banned", ops in the tables not probed)."""
    import logging

    categories: dict[str, str] = {}
    unprobed: set[str] = set()
    fake_log = logging.getLogger("torch._subclasses.fake_tensor")
    level = fake_log.level
    fake_log.setLevel(logging.CRITICAL)  # failed probes log a traceback each
    try:
        with FakeTensorMode():
            torch.set_autocast_enabled("cuda", True)
            torch.set_autocast_dtype("cuda", torch.float16)
            try:
                for base, overloads in cuda_autocast_ops().items():
                    if base in BANNED:
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
    finally:
        fake_log.setLevel(level)
    return categories, frozenset(unprobed)


_CPU_AUTOCAST = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)
_LOW = (torch.float16, torch.bfloat16)


class CudaPolicyOnCpu:
    """Inside it, ``torch.autocast("cpu")`` runs torch.autocast("cuda")'s tables and cast rules.

    The rules, per category (``ATen/autocast_mode.h``): *lower* casts every eligible tensor
    (floating point, not float64) to the autocast dtype, caching casts of float32 leaf tensors
    that require grad until the outermost autocast region exits; *fp32* casts eligible tensors to
    float32, except that an op with an optional ``dtype`` argument gets ``dtype=float32``
    instead when its first argument is eligible and no dtype was given (``fp32_set_opt_dtype``);
    *promote* casts to the widest floating type among the eligible inputs. An op of CUDA's
    tables the probe could not categorise raises when called, so the reference never guesses.
    ``dropout`` takes the fused ``native_dropout`` path, as it does on CUDA and PrivateUse1
    devices (CPU's own decomposition differs in low precision).
    """

    def __init__(self) -> None:
        self._library: torch.library.Library | None = None
        self._clear_cache: Callable[[], None] | None = None
        self._cache: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    # -- casts --------------------------------------------------------------------------------
    @staticmethod
    def _eligible(value: Any) -> bool:
        return (
            isinstance(value, torch.Tensor)
            and value.device.type == "cpu"
            and value.is_floating_point()
            and value.dtype != torch.float64
        )

    def _cast(self, value: Any, dtype: torch.dtype) -> Any:
        if isinstance(value, (list, tuple)):
            return type(value)(self._cast(v, dtype) for v in value)
        if not self._eligible(value) or value.dtype == dtype:
            return value
        cacheable = (
            dtype == torch.get_autocast_dtype("cpu")
            and value.dtype == torch.float32
            and value.requires_grad
            and value.is_leaf
            and not value._is_view()
            and torch.is_autocast_cache_enabled()
        )
        if cacheable:
            hit = self._cache.get(id(value))
            if hit is not None and hit[0] is value:
                return hit[1]
        cast = value.to(dtype)
        if cacheable:
            self._cache[id(value)] = (value, cast)
        return cast

    def _widest(self, values: Any) -> torch.dtype:
        widest = torch.get_autocast_dtype("cpu")
        for value in values:
            if isinstance(value, (list, tuple)):
                if self._widest(value) == torch.float32:
                    widest = torch.float32
            elif self._eligible(value) and value.dtype == torch.float32:
                widest = torch.float32
        return widest

    # -- kernels ------------------------------------------------------------------------------
    def _kernel(self, op: torch._ops.OpOverload, category: str) -> Callable[..., Any]:
        names = [a.name for a in op._schema.arguments]
        dtype_at = names.index("dtype") if "dtype" in names else -1

        def kernel(*args: Any, **kwargs: Any) -> Any:
            with torch._C._ExcludeDispatchKeyGuard(_CPU_AUTOCAST):
                if category == "lower":
                    low = torch.get_autocast_dtype("cpu")
                    args = self._cast(args, low)
                    kwargs = {k: self._cast(v, low) for k, v in kwargs.items()}
                elif category == "fp32" and dtype_at >= 0:
                    given = kwargs.get("dtype", args[dtype_at] if dtype_at < len(args) else None)
                    if given is None and args and self._eligible(args[0]):
                        if dtype_at < len(args):
                            args = (*args[:dtype_at], torch.float32, *args[dtype_at + 1 :])
                        else:
                            kwargs = {**kwargs, "dtype": torch.float32}
                elif category == "fp32":
                    args = self._cast(args, torch.float32)
                    kwargs = {k: self._cast(v, torch.float32) for k, v in kwargs.items()}
                elif category == "promote":
                    to = self._widest((*args, *kwargs.values()))
                    args = self._cast(args, to)
                    kwargs = {k: self._cast(v, to) for k, v in kwargs.items()}
                return op(*args, **kwargs)

        return kernel

    @staticmethod
    def _refuse(name: str, why: str) -> Callable[..., Any]:
        def kernel(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(f"CUDA-policy reference: aten::{name} {why}")

        return kernel

    @staticmethod
    def _fused_dropout(input: torch.Tensor, p: float, train: bool) -> torch.Tensor:
        # at::dropout takes native_dropout for CUDA (and PrivateUse1) tensors; CPU tensors take a
        # decomposition that rounds the 1/(1-p) scale to the input's dtype first
        if train and 0.0 < p < 1.0 and input.numel() > 0:
            return aten.native_dropout(input, p, train)[0]
        with torch._C._ExcludeDispatchKeyGuard(_CPU_AUTOCAST):
            return aten.dropout(input, p, train)

    def _register(self) -> torch.library.Library:
        categories, unprobed = torch_cuda_policy()
        cuda_ops = cuda_autocast_ops()
        library = torch.library.Library("aten", "IMPL")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Overriding a previously registered kernel"
            for base, overloads in autocast_ops("AutocastCPU").items():
                if base in cuda_ops or base in RECURRENT:
                    continue
                for overload in overloads:
                    qualified = base if overload == "default" else f"{base}.{overload}"
                    library.impl(qualified, torch.library.fallthrough_kernel, "AutocastCPU")
            for base, overloads in cuda_ops.items():
                if base in RECURRENT:
                    continue
                for overload in overloads:
                    qualified = base if overload == "default" else f"{base}.{overload}"
                    op = getattr(getattr(aten, base), overload)
                    if base in unprobed:
                        kernel = self._refuse(qualified, "has no probed CUDA category")
                    elif categories[base] == "banned":
                        kernel = self._refuse(qualified, "is unsafe to autocast")
                    else:
                        kernel = self._kernel(op, categories[base])
                    library.impl(qualified, kernel, "AutocastCPU")
            library.impl("dropout", self._fused_dropout, "AutocastCPU")
        return library

    def __enter__(self) -> CudaPolicyOnCpu:
        self._library = self._register()
        self._clear_cache = torch.clear_autocast_cache
        original = self._clear_cache

        def clear_autocast_cache() -> None:  # called when the outermost region exits
            original()
            self._cache.clear()

        torch.clear_autocast_cache = clear_autocast_cache  # type: ignore[assignment]
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        assert self._library is not None and self._clear_cache is not None
        torch.clear_autocast_cache = self._clear_cache  # type: ignore[assignment]
        self._cache.clear()
        self._library._destroy()
        self._library = None
