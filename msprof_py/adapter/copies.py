"""Copies between host and npu memory, and within the device, as DMA tasks.

Host-to-device and device-to-host copies are DMA tasks on the current stream. A copy from or to
pinned host memory (``pin_memory()``) with ``non_blocking=True`` returns at once; any other
copy leaves the host waiting for it, as on real hardware. Data held in a private format is
converted back to ND (TransData) before it leaves the device.
"""

from __future__ import annotations

import torch

from msprof_py.adapter import backend, formats, runtime, shapes_only
from msprof_py.adapter.backend import compile_kernel, transdata
from msprof_py.adapter.opcost import dtype_name
from msprof_py.adapter.runtime import AdapterState, CapturedKernel
from msprof_py.adapter.tensors import host_view, set_storage_format, storage_format
from msprof_py.device import CopyKind, TaskType, costmodel
from msprof_py.device.formats import storage_bytes


def is_pinned_host(t: torch.Tensor) -> bool:
    """True when CPU tensor ``t`` lives in (simulated) page-locked memory."""
    return bool(getattr(t.untyped_storage(), "_msprof_pinned", False))


def _stored_bytes(t: torch.Tensor) -> int:
    fmt = storage_format(t)
    if fmt is not None and fmt[1] == tuple(t.shape):
        return storage_bytes(fmt[1], dtype_name(t.dtype), fmt[0])
    return t.numel() * t.element_size()


#: (id of the device spec, elements, dtype, bytes moved) -> (that spec, the cast's cost): a
#: cast costs the same every time it meets the same sizes (bounded)
_CAST_COSTS: dict[tuple[int, int, str, int], tuple[object, costmodel.KernelCost]] = {}
_CAST_COSTS_LIMIT = 4096
#: the task-record fields of a cast or view copy (none: as ``Engine.submit_kernel`` gives them)
_NO_FIELDS: tuple[tuple, ...] = ((), (), (), (), (), ())


def _cast_cost(state: AdapterState, elements: int, dtype: str, nbytes: int) -> costmodel.KernelCost:
    spec = state.npu.spec
    key = (id(spec), elements, dtype, nbytes)
    found = _CAST_COSTS.get(key)
    if found is not None and found[0] is spec:
        return found[1]
    cost = costmodel.vector_cost(spec, elements=elements, dtype=dtype, bytes_moved=nbytes)
    if len(_CAST_COSTS) >= _CAST_COSTS_LIMIT:
        _CAST_COSTS.clear()
    _CAST_COSTS[key] = (spec, cost)
    return cost


def _copy_kernel_cost(
    state: AdapterState, src: torch.Tensor, dst: torch.Tensor
) -> costmodel.KernelCost:
    """What the kernel copying ``src`` into ``dst`` on the device (a Cast, a ViewCopy) costs."""
    nbytes = _stored_bytes(src) + _stored_bytes(dst)
    return _cast_cost(state, dst.numel(), dtype_name(dst.dtype), nbytes)


def _cast_kernel(state: AdapterState, src: torch.Tensor, dst: torch.Tensor, op_type: str) -> None:
    cost = _copy_kernel_cost(state, src, dst)
    keys = ((tuple(src.shape), src.dtype, "ND"),), ((tuple(dst.shape), dst.dtype, "ND"),)
    if state.capture is not None:
        state.capture.append(CapturedKernel("aten::copy_", op_type, cost, *keys))
        return
    compile_kernel(state, op_type, *keys)
    # the per-op launch (the compiled engine core's where built): the same timeline, task ids
    # and records as submit_kernel, without building the task in Python
    state.npu.engine.launch_kernel(
        state.stream, cost, "aten::copy_", op_type, _NO_FIELDS, state.compiled.attrs
    )


def _teachable(state: AdapterState) -> bool:
    """Whether a copy's launch may be taught to the compiled path in ``state``: it is built and
    chosen, and nothing the launch would depend on beyond the tensors is in play (a graph
    capture, measured host time, L2 modelling, numerics "none")."""
    return (
        backend.NATIVE is not None
        and state.native
        and not state.measured
        and state.capture is None
        and state.npu.l2 is None
    )


def learn_cast(src: torch.Tensor, dst: torch.Tensor) -> None:
    """Teach the compiled cast (``backend.NATIVE``) what casting npu tensor ``src`` into
    ``dst``, just done by ``kernels.to_copy`` in ``src``'s strides, launched: its Cast kernel and
    the private format ``dst`` kept; it then runs such casts itself with the same timeline. Not
    taught where the launch depends on more than the source's sizes, dtype and format and the
    dtype cast to (:func:`_teachable`), or for a source read through a TransData."""
    state = runtime.state()
    if not _teachable(state):
        return
    src_fmt, dst_fmt = storage_format(src), storage_format(dst)
    if src_fmt != dst_fmt:  # read through a TransData (a format dst could not keep)
        return
    formats = None
    if dst_fmt is not None:
        padded = storage_bytes(dst_fmt[1], dtype_name(dst.dtype), dst_fmt[0])
        formats = ((dst_fmt, padded, "Cast"),)
    kernels = ((_copy_kernel_cost(state, src, dst), "Cast"),)
    compiled = state.compiled
    backend.NATIVE.learn_cast(  # type: ignore[union-attr]
        src, dst.dtype, kernels, _NO_FIELDS, "aten::copy_", compiled, compiled.epoch, formats
    )


def learn_copy(src: torch.Tensor, dst: torch.Tensor) -> None:
    """Teach the compiled copy (``backend.NATIVE``) what copying npu tensor ``src`` into npu
    tensor ``dst`` by a kernel, just done by ``kernels.copy_from``, launched: a ViewCopy (or a
    Cast between dtypes). The compiled side learns only copies by a kernel between tensors in
    no private format (a plain D2D copy is a DMA task; a private format, a TransData first):
    the others are left untaught here, before their cost is looked up."""
    state = runtime.state()
    if not _teachable(state) or _plain_copy(src, dst):
        return
    if storage_format(src) is not None or storage_format(dst) is not None:
        return
    op_type = "Cast" if src.dtype != dst.dtype else "ViewCopy"
    kernels = ((_copy_kernel_cost(state, src, dst), op_type),)
    compiled = state.compiled
    backend.NATIVE.learn_copy(  # type: ignore[union-attr]
        src, dst, kernels, _NO_FIELDS, "aten::copy_", compiled, compiled.epoch
    )


def _d2d_copy_cost(state: AdapterState, nbytes: int) -> costmodel.KernelCost:
    """A device-to-device copy inside a captured graph: one DMA task (no core), as long as the
    eager copy takes."""
    duration = costmodel.copy_ns(state.npu.spec, CopyKind.D2D, nbytes)
    sched = state.npu.spec.dispatch.device_sched_ns
    memory = float(duration - sched)
    bound = costmodel.bound_of(sched, 0.0, 0.0, memory)
    return costmodel.KernelCost(
        TaskType.DMA, 0, duration, sched, 0.0, 0.0, memory, 1, bound, 0.0, nbytes
    )


def copy(src: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    """Copy ``src`` into ``dst`` where at least one of them is an npu tensor."""
    state = runtime.state()
    state.enter("aten::copy_", (src, dst))
    try:
        if src.device.type == "npu" and dst.device.type == "npu":
            _device_to_device(state, src, dst)
        elif dst.device.type == "npu":
            _host_to_device(state, src, dst, non_blocking)
        else:
            _device_to_host(state, src, dst, non_blocking)
        return dst
    finally:
        state.leave()


def _host_to_device(
    state: AdapterState, src: torch.Tensor, dst: torch.Tensor, non_blocking: bool
) -> None:
    pinned = is_pinned_host(src)
    state.npu.engine.submit_memcpy(
        state.stream,
        CopyKind.H2D,
        src.numel() * src.element_size(),
        pinned=pinned,
        blocking=not (pinned and non_blocking),
        name="aten::copy_ (H2D)",
    )
    if src.dtype != dst.dtype:
        _cast_kernel(state, src, dst, "Cast")
    fmt = storage_format(dst)
    if state.meta:  # shapes only: the values the host sent stay known (small tensors)
        shapes_only.write_known(dst, src)
    else:
        host_view(dst).copy_(src)
    if fmt is not None:  # the host sent ND data into a private-format tensor: re-lay it
        set_storage_format(dst, None)
        transdata(state, dst, fmt[0])


def _device_to_host(
    state: AdapterState, src: torch.Tensor, dst: torch.Tensor, non_blocking: bool
) -> None:
    values = shapes_only.known_view(src) if state.meta else host_view(src)
    if values is None:  # shapes only, values computed on the device: a framework placeholder
        shapes_only.allow_placeholder("copying npu tensor values to the host (.cpu(), .to('cpu'))")
    if storage_format(src) is not None:
        transdata(state, src, formats.ND, retag=False)
    pinned = is_pinned_host(dst)
    state.npu.engine.submit_memcpy(
        state.stream,
        CopyKind.D2H,
        src.numel() * src.element_size(),
        pinned=pinned,
        blocking=not (pinned and non_blocking),
        name="aten::copy_ (D2H)",
    )
    if values is None:
        dst.zero_()
    else:
        dst.copy_(values)


def _plain_copy(src: torch.Tensor, dst: torch.Tensor) -> bool:
    """Whether a copy between npu tensors is a plain one (a DMA task, no kernel): the same
    dtype and sizes, both contiguous."""
    return (
        src.dtype == dst.dtype
        and src.shape == dst.shape
        and src.is_contiguous()
        and dst.is_contiguous()
    )


def _device_to_device(state: AdapterState, src: torch.Tensor, dst: torch.Tensor) -> None:
    src_fmt, dst_fmt = storage_format(src), storage_format(dst)
    if src_fmt is not None and (dst_fmt is None or dst_fmt[0] != src_fmt[0]):
        transdata(state, src, dst_fmt[0] if dst_fmt is not None else formats.ND, retag=False)
    plain = _plain_copy(src, dst)
    if plain and state.capture is not None:
        nbytes = src.numel() * src.element_size()
        keys = ((tuple(src.shape), src.dtype, "ND"),), ((tuple(dst.shape), dst.dtype, "ND"),)
        cost = _d2d_copy_cost(state, nbytes)
        state.capture.append(CapturedKernel("aten::copy_", "MemcpyAsync", cost, *keys))
    elif plain:
        state.npu.engine.submit_memcpy(
            state.stream, CopyKind.D2D, src.numel() * src.element_size(), name="aten::copy_ (D2D)"
        )
    else:
        _cast_kernel(state, src, dst, "Cast" if src.dtype != dst.dtype else "ViewCopy")
    if state.meta:
        shapes_only.write_known(dst, shapes_only.known_view(src))
    else:
        host_view(dst).copy_(host_view(src))
