"""Explicit PrivateUse1 kernels, and the registration of the backend with the dispatcher."""

from __future__ import annotations

from typing import Any

import torch

from msprof_py.adapter import backend, copies, foreach, formats, runtime, shapes_only
from msprof_py.adapter.opcost import dtype_name
from msprof_py.adapter.tensors import (
    dense_non_overlapping,
    hold_device_bytes,
    host_view,
    new_tensor,
    resize_storage_bytes,
    set_storage_format,
    set_to_storage,
    storage_format,
)
from msprof_py.device import native as device_native
from msprof_py.device.formats import storage_bytes

aten = torch.ops.aten
_PLAIN_FORMATS = (torch.contiguous_format, torch.preserve_format)
_LIBRARIES: list[torch.library.Library] = []


# ---- factories ---------------------------------------------------------------------------


def empty_memory_format(
    size: list[int],
    dtype: torch.dtype | None = None,
    layout: Any = None,
    device: Any = None,
    pin_memory: bool | None = None,
    memory_format: torch.memory_format | None = None,
) -> torch.Tensor:
    """``torch.empty(..., device="npu")``: device memory from the caching allocator."""
    dtype = dtype or torch.get_default_dtype()
    stride = None
    if memory_format is not None and memory_format not in _PLAIN_FORMATS:
        stride = torch.empty(size, dtype=dtype, device="meta", memory_format=memory_format).stride()
    return new_tensor(size, stride, dtype, runtime.state(), "aten::empty")


def empty_strided(
    size: list[int],
    stride: list[int],
    dtype: torch.dtype | None = None,
    layout: Any = None,
    device: Any = None,
    pin_memory: bool | None = None,
) -> torch.Tensor:
    """``torch.empty_strided(..., device="npu")``."""
    dtype = dtype or torch.get_default_dtype()
    return new_tensor(size, stride, dtype, runtime.state(), "aten::empty_strided")


def efficient_zero_tensor(
    size: list[int],
    dtype: torch.dtype | None = None,
    layout: Any = None,
    device: Any = None,
    pin_memory: bool | None = None,
) -> torch.Tensor:
    """``aten::_efficientzerotensor`` (autograd's zero gradient, e.g. of ``sgn`` of real inputs):
    plain zeros on npu. CPU's version has no storage, so a host view of it cannot be read."""
    return torch.zeros(size, dtype=dtype or torch.get_default_dtype(), device="npu")


# ---- copies ------------------------------------------------------------------------------


def copy_from(src: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    """``aten::_copy_from``: the copy between npu and host memory behind ``copy_``."""
    copies.copy(src, dst, non_blocking)
    if src.device.type == dst.device.type == "npu":
        copies.learn_copy(src, dst)
    return dst


def copy_from_and_resize(src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    """``aten::_copy_from_and_resize``."""
    if dst.shape != src.shape:
        dst.resize_(src.shape)
    return copies.copy(src, dst)


def to_copy(
    self: torch.Tensor,
    dtype: torch.dtype | None = None,
    layout: Any = None,
    device: torch.device | None = None,
    pin_memory: bool | None = None,
    non_blocking: bool = False,
    memory_format: torch.memory_format | None = None,
) -> torch.Tensor:
    """``aten::_to_copy``: ``.to(device, dtype)``, ``.cpu()``, ``.npu()``."""
    with torch._C.DisableTorchFunctionSubclass():  # UninitializedParameter hides its shape
        shape = torch._C.TensorBase.size(self)
        own_stride = torch._C.TensorBase.stride(self)
        contiguous = torch._C.TensorBase.is_contiguous(self)
        own_dtype, own_device = self.dtype, self.device
    target = torch.device(device) if device is not None else own_device
    dtype = dtype or own_dtype
    if contiguous and memory_format in (None, torch.preserve_format):
        stride = own_stride  # the common case, without the dimension sort
    else:
        stride = _copy_strides(shape, own_stride, memory_format)
    if target.type == "npu":
        dst = torch.empty_strided(shape, stride, dtype=dtype, device="npu")
        _keep_private_format(self, dst)
    else:
        dst = torch.empty_strided(shape, stride, dtype=dtype, device=target)
        if non_blocking or pin_memory:
            dst.untyped_storage()._msprof_pinned = True  # type: ignore[attr-defined]
    copies.copy(self, dst, non_blocking)
    # a cast on the device in the source's strides: the case the compiled cast runs
    if target.type == own_device.type == "npu" and dtype != own_dtype and stride is own_stride:
        copies.learn_cast(self, dst)
    return dst


def _copy_strides(
    shape: torch.Size, stride: tuple[int, ...], memory_format: torch.memory_format | None
) -> tuple[int, ...]:
    """The strides ``_to_copy`` gives its result, as on CPU and CUDA: ``preserve_format`` keeps a
    dense, non-overlapping tensor's strides exactly (a permuted or channels-last tensor stays
    so, and CPU kernels then take the same code path for it); anything else is contiguous,
    in the suggested memory format (channels-last order stays channels-last), or in the
    memory format asked for."""
    if memory_format in (None, torch.preserve_format):
        if dense_non_overlapping(shape, stride):
            return tuple(stride)
        memory_format = _suggested_format(shape, stride)
    return torch.empty(shape, device="meta", memory_format=memory_format).stride()


def _suggested_format(shape: torch.Size, stride: tuple[int, ...]) -> torch.memory_format:
    """``Tensor.suggest_memory_format`` for strides that are not dense: channels-last when the
    channel dimension has the smallest stride and the others follow in order."""
    order = {4: (0, 2, 3, 1), 5: (0, 2, 3, 4, 1)}.get(len(shape))
    if order is not None and 1 not in shape:
        by_stride = tuple(sorted(range(len(shape)), key=lambda d: -stride[d]))
        if by_stride == order:
            return torch.channels_last if len(shape) == 4 else torch.channels_last_3d
    return torch.contiguous_format


def _keep_private_format(src: torch.Tensor, dst: torch.Tensor) -> None:
    """A dtype cast on the device keeps a private format (NC1HWC0 stays NC1HWC0): the Cast
    kernel writes ``dst`` in ``src``'s layout, so no TransData back to ND is needed."""
    if src.device.type != "npu" or src.dtype == dst.dtype:
        return
    fmt = storage_format(src)
    if fmt is None or fmt[1] != tuple(dst.shape) or not formats.private_allowed(dst):
        return
    state = runtime.state()
    set_storage_format(dst, fmt[0], fmt[1])
    nbytes = storage_bytes(fmt[1], dtype_name(dst.dtype), fmt[0])
    hold_device_bytes(dst, nbytes, state, "Cast")


def local_scalar_dense(self: torch.Tensor) -> Any:
    """``.item()``: the host waits for the device and copies the value back.

    With numerics "none" the value is the host-known one, or a framework read's placeholder
    zero (see :mod:`msprof_py.adapter.shapes_only`); any other read raises.
    """
    state = runtime.state()
    name = "Tensor.item() (aten::_local_scalar_dense)"
    state.enter("aten::_local_scalar_dense", (self,))
    try:
        if not state.meta:
            backend.sync_for_value(state, name)
            return host_view(self).item()
        known = shapes_only.known_view(self)
        if known is None:
            shapes_only.allow_placeholder(name)
            known = torch.zeros((), dtype=self.dtype)
        backend.record_value_sync(state, name)
        return known.item()
    finally:
        state.leave()


def record_stream(self: torch.Tensor, stream: Any) -> None:
    """``Tensor.record_stream``: the caching allocator here frees at once; nothing to do."""


def set_source_storage(self: torch.Tensor, source: Any) -> torch.Tensor:
    """``Tensor.set_(storage)``: ``self`` a one-dimensional view of all of ``source``."""
    return _set_storage(self, source, 0, None, ())


def set_source_storage_offset(
    self: torch.Tensor, source: Any, storage_offset: int, size: list[int], stride: list[int] = ()
) -> torch.Tensor:
    """``Tensor.set_(storage, offset, size, stride)`` (how ``torch.load`` rebuilds a tensor on
    the storage it restored)."""
    return _set_storage(self, source, storage_offset, size, stride)


def _set_storage(
    self: torch.Tensor, source: Any, offset: int, size: list[int] | None, stride: Any
) -> torch.Tensor:
    if source.device != self.device:
        raise RuntimeError(
            f'Attempted to set the storage of a tensor on device "{self.device}" to a storage '
            f'on different device "{source.device}".  This is no longer allowed; the devices '
            "must match."
        )
    return set_to_storage(self, source, offset, size, list(stride), runtime.state())


# ---- convolutions: run the CPU kernels ---------------------------------------------------


def _conv_forward(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    transposed: bool,
    output_padding: list[int],
    groups: int,
) -> torch.Tensor:
    return aten.convolution.default(
        input, weight, bias, stride, padding, dilation, transposed, output_padding, groups
    )


def _conv_backward(
    grad_output: torch.Tensor,
    input: torch.Tensor,
    weight: torch.Tensor,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    transposed: bool,
    output_padding: list[int],
    groups: int,
    output_mask: list[bool],
) -> tuple[torch.Tensor, ...]:
    bias_sizes = [weight.shape[1] if transposed else weight.shape[0]] if output_mask[2] else None
    return aten.convolution_backward.default(
        grad_output,
        input,
        weight,
        bias_sizes,
        stride,
        padding,
        dilation,
        transposed,
        output_padding,
        groups,
        output_mask,
    )


# ---- pinned host memory (CPU kernels) ----------------------------------------------------


def pin_memory(self: torch.Tensor, device: Any = None) -> torch.Tensor:
    """``Tensor.pin_memory()``: a copy in (simulated) page-locked host memory."""
    out = self.clone()
    out.untyped_storage()._msprof_pinned = True  # type: ignore[attr-defined]
    return out


def is_pinned(self: torch.Tensor, device: Any = None) -> bool:
    """``Tensor.is_pinned()`` for CPU tensors."""
    return copies.is_pinned_host(self)


# ---- registration ------------------------------------------------------------------------


#: in-place ops that change metadata or copy (they have kernels or paths of their own)
_OWN_INPLACE = frozenset(
    {"squeeze_", "unsqueeze_", "transpose_", "t_", "detach_", "resize_as_", "copy_", "index_put_"}
)


#: composites that refuse devices other than CPU, CUDA and XPU ("mode only supports CPU ...")
_DEVICE_CHECKED = frozenset({"aten::mode.values"})


def _runs_whole(name: str) -> bool:
    """Whether op ``name`` gets the fallback registered directly (instead of decomposing).

    Structured ops would decompose into empty + ``.out``; ops with both a CPU kernel and a
    composite one (native_layer_norm, silu_backward ...) would decompose differently from CPU;
    composite in-place ops (``addr_``, ``logical_and_``) call their ``.out`` with ``self`` as
    ``out``, which CPU kernels recognise by reference, and a boxed call cannot pass a reference;
    a few composites check the device type: all run whole, so the host computes exactly what
    CPU computes.
    """
    if not name.startswith("aten::"):
        return False
    if name in _DEVICE_CHECKED:
        return True
    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    if has_kernel(name, "CompositeExplicitAutogradNonFunctional"):
        return True
    explicit = has_kernel(name, "CompositeExplicitAutograd")
    if has_kernel(name, "CPU"):
        return explicit or has_kernel(name, "CompositeImplicitAutograd")
    base = name[len("aten::") :].partition(".")[0]
    return explicit and base.endswith("_") and not base.startswith("_") and base not in _OWN_INPLACE


def register() -> None:
    """Register the fallback and the explicit kernels (once per process)."""
    autocast = torch.library.Library("_", "IMPL")
    autocast.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    impl = torch.library.Library("aten", "IMPL")
    _LIBRARIES.extend([autocast, impl])

    names = torch._C._dispatch_get_all_op_names()
    whole = [name[len("aten::") :] for name in names if _runs_whole(name)]
    # the convolutions have no CPU kernel: they run whole, calling the CPU's convolutions
    whole += ["convolution_overrideable", "convolution_backward_overrideable"]
    if backend.NATIVE is not None:
        # the compiled boxed kernel: plain ops without a Python frame, the rest handed to
        # backend.fallback as torch's Python kernels get them
        backend.NATIVE.install_kernels(backend.fallback, backend.finish_call, runtime, whole)
    else:
        fallback_lib = torch.library.Library("_", "IMPL")
        fallback_lib.fallback(backend.fallback, "PrivateUse1")
        _LIBRARIES.append(fallback_lib)
        for name in whole:
            packet, _, overload = name.partition(".")
            op = getattr(getattr(aten, packet), overload or "default")
            impl.impl(name, backend.whole_op_kernel(op), "PrivateUse1")

    explicit = {
        "_efficientzerotensor": efficient_zero_tensor,
        "_copy_from": copy_from,
        "_copy_from_and_resize": copy_from_and_resize,
        "_to_copy": to_copy,
        "_local_scalar_dense": local_scalar_dense,
        "record_stream": record_stream,
        "set_.source_Storage": set_source_storage,
        "set_.source_Storage_storage_offset": set_source_storage_offset,
    }
    if backend.NATIVE is not None:
        # made in compiled code in the plain case, by these kernels otherwise
        backend.NATIVE.install_factories(empty_memory_format, empty_strided)
        # casts and copies on the device once learned (copies.learn_cast, learn_copy), by
        # to_copy and copy_from otherwise
        backend.NATIVE.install_copies(to_copy, copy_from)
        # an npu storage's resize_() (torch asks the compiled hooks; where they are not built
        # it raises torch's NotImplementedError)
        backend.NATIVE.install_storage_resize(resize_storage_bytes)
        # host-op rows written through the recorder's row sink without Python calls
        device_core = device_native.load()
        if device_core is not None:
            backend.NATIVE.install_row_api(device_core.row_api)
        del explicit["_to_copy"], explicit["_copy_from"]
    else:
        explicit.update(
            {"empty.memory_format": empty_memory_format, "empty_strided": empty_strided}
        )
    for name, fn in explicit.items():
        impl.impl(name, fn, "PrivateUse1")
    # multi-tensor ops: torch_npu's multi-tensor kernels where its fast route holds
    foreach.register(impl, backend.fallback, backend.NATIVE)
    # copies read conjugate and negative views themselves (host_view keeps the bits): torch's
    # fallback for those bits would materialise the source with clone, which copies with
    # _copy_from again, without end
    for name in ("_copy_from", "_copy_from_and_resize"):
        for key in ("Conjugate", "Negative"):
            impl.impl(name, torch.library.fallthrough_kernel, key)

    backend.replace_host_call(
        aten.convolution_overrideable.default, _conv_forward, ("aten::convolution", "", False)
    )
    backend.replace_host_call(
        aten.convolution_backward_overrideable.default,
        _conv_backward,
        ("aten::convolution_backward", "", True),
    )
    from msprof_py.adapter import meta_shapes

    for op, shape_fn in meta_shapes.FAST.items():
        backend.plan_of(op).meta_call = shape_fn

    # composites whose npu path would differ from the CPU's: the whole op runs on the host
    from msprof_py.adapter import host_ops, recurrent, sdpa

    host_ops.register(impl, [*recurrent.host_ops(), *sdpa.host_ops()])
    from msprof_py.adapter import sdpa_graph

    sdpa_graph.register(impl)  # SDPA's fused node in compiled graphs

    impl.impl("_pin_memory", pin_memory, "CPU")
    impl.impl("is_pinned", is_pinned, "CPU")
