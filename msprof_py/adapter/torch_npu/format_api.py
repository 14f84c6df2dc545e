"""torch_npu's format API: ``npu_format_cast``, ``npu_format_cast_`` and ``get_npu_format``.

As in torch_npu (``FormatCastKernelNpu.cpp``), a tensor's data format belongs to its storage:

* casting to the format the tensor already has returns the tensor itself, and launches nothing;
* casting between two *base* formats (ND, NCHW, NHWC, NCDHW, and here also NC and NCL) only
  changes the storage's format tag (torch_npu's ``format_cast_as_base_format``): no device work,
  and ``npu_format_cast`` returns the tensor itself, re-tagged;
* any other cast re-lays the data with one TransData task. ``npu_format_cast`` returns a NEW npu
  tensor holding the same values in the new format (the source keeps its format);
  ``npu_format_cast_`` converts the tensor's own storage in place.

``get_npu_format`` returns the aclFormat id (section 4 of the device facts). An untagged tensor
reports the base format torch_npu gives a fresh tensor of its rank
(``InferFormat::GuessBaseFormat``): NCHW (0) for 4-D, NCDHW (30) for 5-D, ND (2) otherwise.
torch_npu decides this from the shape the *storage* was created with; the simulator only knows
the tensor's own shape, so a 2-D view of a 4-D tensor reports ND here where torch_npu would
report NCHW.

Private formats are tracked by :func:`msprof_py.adapter.tensors.set_storage_format` (which the
backend reads to insert TransData before kernels that need ND); a base format that differs from
the rank default is remembered in the storage attribute ``_npu_base_fmt`` (read only here).
Storages in a private format still hold their logical (unpadded) bytes of device memory.
"""

from __future__ import annotations

import warnings

import torch

from msprof_py.adapter import backend
from msprof_py.adapter.custom_ops import device_call, host, state, wrap
from msprof_py.adapter.opcost import dtype_name
from msprof_py.adapter.tensors import set_storage_format, storage_format
from msprof_py.device.formats import Format, storage_shape

__all__ = ["get_npu_format", "npu_format_cast", "npu_format_cast_"]

#: Formats whose cast is a re-tag, never a TransData (torch_npu's base formats, plus NC and NCL,
#: which lay elements out exactly as ND).
BASE_FORMATS = frozenset({Format.ND, Format.NCHW, Format.NHWC, Format.NCDHW, Format.NC, Format.NCL})

_BASE_ATTR = "_npu_base_fmt"

FormatArg = int | str | Format | torch.Tensor


def _check_npu(t: object, what: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor) or t.device.type != "npu":
        raise TypeError(f"{what} expects an npu tensor, got {type(t).__name__}")
    return t


def _rank_default(t: torch.Tensor) -> Format:
    if t.dim() == 4:
        return Format.NCHW
    if t.dim() == 5:
        return Format.NCDHW
    return Format.ND


def _format_of(t: torch.Tensor) -> Format:
    tagged = storage_format(t)
    if tagged is not None:
        return Format.parse(tagged[0])
    base = getattr(t.untyped_storage(), _BASE_ATTR, None)
    return base if base is not None else _rank_default(t)


def _set_base(t: torch.Tensor, fmt: Format) -> None:
    """Tag ``t``'s storage with base format ``fmt`` (clears any private-format tag)."""
    set_storage_format(t, None)
    storage = t.untyped_storage()
    if fmt is _rank_default(t):
        if hasattr(storage, _BASE_ATTR):
            delattr(storage, _BASE_ATTR)
    else:
        setattr(storage, _BASE_ATTR, fmt)


def _target(tensor: torch.Tensor, acl_format: FormatArg) -> Format:
    if isinstance(acl_format, torch.Tensor):  # the ``npu_format_cast(self, dst)`` overload
        return _format_of(_check_npu(acl_format, "npu_format_cast"))
    fmt = Format.parse(acl_format)
    if fmt is Format.FRACTAL_NZ and tensor.dim() < 2:
        warnings.warn(
            "Cannot create tensor with NZ format while dim < 2, tensor will be created with ND "
            "format.",
            stacklevel=3,
        )
        return Format.ND
    if fmt not in BASE_FORMATS:
        # raises ValueError for a shape the format cannot hold (e.g. NC1HWC0 of a 5-D tensor)
        storage_shape(tuple(tensor.shape), dtype_name(tensor.dtype), fmt)
    return fmt


def _is_view_of_private(t: torch.Tensor) -> bool:
    tagged = storage_format(t)
    return tagged is not None and tagged[1] != tuple(t.shape)


def _relayout(tensor: torch.Tensor, dst: Format) -> None:
    """One TransData re-laying ``tensor``'s storage into ``dst`` (and tagging it)."""
    backend.transdata(state(), tensor, dst.value)
    if dst in BASE_FORMATS:
        _set_base(tensor, dst)  # a base format is a tag of ours, not a private one


def npu_format_cast(tensor: torch.Tensor, acl_format: FormatArg) -> torch.Tensor:
    """``tensor``'s values with the data format ``acl_format`` (aclFormat id, name or tensor).

    Returns ``tensor`` itself when nothing has to move (same format, or base <-> base, which
    re-tags ``tensor``); otherwise a new npu tensor in the new format, after one TransData task.
    """
    _check_npu(tensor, "npu_format_cast")
    dst = _target(tensor, acl_format)
    src = _format_of(tensor)
    if src is dst:
        return tensor
    if src in BASE_FORMATS and dst in BASE_FORMATS:
        _set_base(tensor, dst)
        return tensor
    with device_call("torch_npu.npu_format_cast") as current:
        if _is_view_of_private(tensor):  # read a view of private-format data back as ND first
            backend.transdata(current, tensor, Format.ND.value, retag=False)
        out = wrap(host(tensor).clone(memory_format=torch.contiguous_format), "npu_format_cast")
        tagged = storage_format(tensor)
        if tagged is not None and tagged[1] == tuple(tensor.shape):
            set_storage_format(out, tagged[0], tagged[1])
        _relayout(out, dst)
    return out


def npu_format_cast_(tensor: torch.Tensor, acl_format: FormatArg) -> torch.Tensor:
    """Convert ``tensor``'s storage to ``acl_format`` in place (one TransData when data moves).

    Every tensor sharing the storage sees the new format (torch_npu swaps in a new storage, so
    there other views keep the old one; values are the same either way).
    """
    _check_npu(tensor, "npu_format_cast_")
    dst = _target(tensor, acl_format)
    src = _format_of(tensor)
    if src is dst:
        return tensor
    if src in BASE_FORMATS and dst in BASE_FORMATS:
        _set_base(tensor, dst)
        return tensor
    if _is_view_of_private(tensor):
        raise RuntimeError(
            "npu_format_cast_ does not support a view of a tensor held in the internal format "
            f"{storage_format(tensor)[0]}; cast the base tensor instead"  # type: ignore[index]
        )
    with device_call("torch_npu.npu_format_cast_"):
        _relayout(tensor, dst)
    return tensor


def get_npu_format(tensor: torch.Tensor) -> int:
    """The aclFormat id of ``tensor``'s storage (ND=2, NCHW=0, NC1HWC0=3, FRACTAL_NZ=29 ...)."""
    _check_npu(tensor, "get_npu_format")
    return _format_of(tensor).acl_id
