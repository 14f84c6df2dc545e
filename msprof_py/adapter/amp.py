"""Autocast for ``npu``: the CUDA-style mixed-precision policy as AutocastPrivateUse1 kernels.

torch 2.13 registers no autocast kernels for PrivateUse1, so the backend brings them: ops in
:data:`LOWER_PRECISION` run in the autocast dtype (fp16 or bf16), ops in :data:`FP32` in
float32, ops in :data:`PROMOTE` in the widest floating dtype among their inputs. Each kernel
casts the npu floating-point inputs (a ``Cast`` task on the device) and calls the op below the
autocast key; casts of weights (leaf tensors that require grad) are cached for the autocast
region, as torch does. The policy is ``torch.autocast("cuda")``'s op for op (a test compares it
with torch's own AutocastCUDA kernels), except for the recurrent ops, which follow
``torch.autocast("cpu")`` (see :mod:`msprof_py.adapter.host_ops`). ``batch_norm`` is not in
it, so BatchNorm runs in its input's dtype, as on CUDA.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

aten = torch.ops.aten

#: ops that run in the autocast dtype
LOWER_PRECISION = (
    "_convolution",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_tbc",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "convolution",
    "prelu",
    "addmm",
    "addmv",
    "addr",
    "matmul",
    "einsum",
    "mm",
    "mv",
    "linalg_vecdot",
    "linear",
    "addbmm",
    "baddbmm",
    "bmm",
    "chain_matmul",
    "linalg_multi_dot",
    "scaled_dot_product_attention",
    "_scaled_dot_product_flash_attention",
    "cudnn_convolution",
    "cudnn_convolution_transpose",
)
# The recurrent ops (cells included) are absent on purpose: they run whole on the host
# (msprof_py.adapter.host_ops) under CPU autocast, so their dtypes and values are what
# torch.autocast("cpu") gives the same module.
#: ops that run in float32
FP32 = (
    "acos",
    "asin",
    "cosh",
    "erfinv",
    "exp",
    "expm1",
    "log",
    "log10",
    "log2",
    "log1p",
    "reciprocal",
    "rsqrt",
    "sinh",
    "tan",
    "pow",
    "softplus",
    "layer_norm",
    "native_layer_norm",
    "group_norm",
    "frobenius_norm",
    "nuclear_norm",
    "cosine_similarity",
    "poisson_nll_loss",
    "cosine_embedding_loss",
    "nll_loss",
    "nll_loss2d",
    "hinge_embedding_loss",
    "kl_div",
    "l1_loss",
    "smooth_l1_loss",
    "huber_loss",
    "mse_loss",
    "margin_ranking_loss",
    "multilabel_margin_loss",
    "soft_margin_loss",
    "triplet_margin_loss",
    "multi_margin_loss",
    "binary_cross_entropy_with_logits",
    "dist",
    "pdist",
    "cdist",
    "renorm",
    "logsumexp",
    "softmax",
    "log_softmax",
    "cumprod",
    "cumsum",
    "prod",
    "sum",
    "norm",
    "rms_norm",
    "upsample_nearest1d",
    "_upsample_nearest_exact1d",
    "upsample_nearest2d",
    "_upsample_nearest_exact2d",
    "upsample_nearest3d",
    "_upsample_nearest_exact3d",
    "upsample_linear1d",
    "upsample_bilinear2d",
    "_upsample_bilinear2d_aa",
    "upsample_trilinear3d",
    "upsample_bicubic2d",
    "_upsample_bicubic2d_aa",
    "linalg_vector_norm",
    "linalg_matrix_norm",
    "binary_cross_entropy_with_logits",
)
# batch_norm is absent on purpose, as in torch.autocast("cuda"): it runs in its input's dtype
# (fp16 activations stay fp16; the kernel keeps fp32 statistics and parameters internally).
#: ops that run in the widest floating dtype of their inputs
PROMOTE = (
    "addcdiv",
    "addcmul",
    "atan2",
    "bilinear",
    "cross",
    "dot",
    "vdot",
    "grid_sampler",
    "index_put",
    "scatter_add",
    "tensordot",
)
#: ops autocast refuses, as torch.autocast("cuda") does (unsafe in fp16)
BANNED = ("binary_cross_entropy",)
_BANNED_MESSAGE = (
    "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast; "
    "use torch.nn.functional.binary_cross_entropy_with_logits or torch.nn.BCEWithLogitsLoss"
)

_AUTOCAST_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)
_LOW = (torch.float16, torch.bfloat16)
_cache: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
_LIBRARY: list[torch.library.Library] = []


def _cast(value: Any, dtype: torch.dtype) -> Any:
    if isinstance(value, torch.Tensor):
        eligible = (
            value.device.type == "npu"
            and value.is_floating_point()
            and value.dtype != dtype
            and value.dtype != torch.float64
        )
        if not eligible:
            return value
        cacheable = value.is_leaf and value.requires_grad and torch.is_autocast_cache_enabled()
        if cacheable:
            hit = _cache.get(id(value))
            if hit is not None and hit[0] is value:
                return hit[1]
        cast = value.to(dtype)
        if cacheable:
            _cache[id(value)] = (value, cast)
        return cast
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, dtype) for v in value)
    return value


def _widest(values: Any) -> torch.dtype | None:
    widest = None
    for value in values:
        if isinstance(value, (list, tuple)):
            found = _widest(value)
        elif isinstance(value, torch.Tensor) and value.is_floating_point():
            found = value.dtype
        else:
            continue
        if found is None:
            continue
        if widest is None or (found.itemsize, found not in _LOW) > (
            widest.itemsize,
            widest not in _LOW,
        ):
            widest = found
    return widest


def _kernel(
    op: torch._ops.OpOverload, target: Callable[[tuple, dict], torch.dtype | None]
) -> Callable[..., Any]:
    names = [a.name for a in op._schema.arguments]
    dtype_at = names.index("dtype") if "dtype" in names else -1

    def kernel(*args: Any, **kwargs: Any) -> Any:
        explicit = kwargs.get("dtype")
        if explicit is None and 0 <= dtype_at < len(args):
            explicit = args[dtype_at]
        # an fp32 op given an explicit output dtype runs in that dtype (CUDA's
        # fp32_set_opt_dtype): log_softmax(x, 1, dtype=torch.float16) stays fp16
        dtype = None if target is _fp32 and explicit is not None else target(args, kwargs)
        with torch._C._ExcludeDispatchKeyGuard(_AUTOCAST_KEYS):
            if dtype is not None:
                args = tuple(_cast(a, dtype) for a in args)
                kwargs = {k: _cast(v, dtype) for k, v in kwargs.items()}
            return op(*args, **kwargs)

    return kernel


def _banned(op: torch._ops.OpOverload) -> Callable[..., Any]:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(_BANNED_MESSAGE)

    return kernel


def _lower(args: tuple, kwargs: dict) -> torch.dtype:
    return torch.get_autocast_dtype("npu")


def _fp32(args: tuple, kwargs: dict) -> torch.dtype | None:
    return torch.float32


def _promote(args: tuple, kwargs: dict) -> torch.dtype | None:
    return _widest((*args, *kwargs.values()))


def clear_cache() -> None:
    """Drop cached weight casts (when the outermost autocast region exits)."""
    _cache.clear()


def _patch_clear_autocast_cache() -> None:
    original = torch.clear_autocast_cache

    def clear_autocast_cache() -> None:
        original()
        clear_cache()

    torch.clear_autocast_cache = clear_autocast_cache  # type: ignore[assignment]


def register() -> None:
    """Register the policy kernels on AutocastPrivateUse1 (once per process)."""
    library = torch.library.Library("aten", "IMPL")
    _LIBRARY.append(library)
    policy = ((LOWER_PRECISION, _lower), (FP32, _fp32), (PROMOTE, _promote), (BANNED, None))
    for names, target in policy:
        for name in names:
            packet = getattr(aten, name, None)
            if packet is None:
                continue
            for overload in packet.overloads():
                qualified = f"{name}.{overload}" if overload != "default" else name
                try:
                    taken = torch._C._dispatch_has_kernel_for_dispatch_key(
                        f"aten::{qualified}", "AutocastPrivateUse1"
                    )
                except RuntimeError:  # a Python-only overload (einsum.sublist)
                    continue
                if taken:
                    continue  # torch's own (conv1d.padding): keep it
                op = getattr(packet, overload)
                kernel = _banned(op) if target is None else _kernel(op, target)
                library.impl(qualified, kernel, "AutocastPrivateUse1")
    _patch_clear_autocast_cache()


class autocast(torch.amp.autocast):
    """``torch.npu.amp.autocast``: ``torch.autocast("npu", ...)``."""

    def __init__(
        self, enabled: bool = True, dtype: torch.dtype = torch.float16, cache_enabled: bool = True
    ) -> None:
        super().__init__("npu", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    """``torch.npu.amp.GradScaler``: ``torch.amp.GradScaler("npu", ...)``."""

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        super().__init__(
            "npu",
            init_scale=init_scale,
            growth_factor=growth_factor,
            backoff_factor=backoff_factor,
            growth_interval=growth_interval,
            enabled=enabled,
        )
