"""What the host reads from the device in shapes-only mode (``numerics="none"``).

With numerics ``"none"`` npu tensors are backed by meta tensors: the device computes no values.
The host still needs a few, and the policy for them is:

1. **Values the host put there are known.** A tensor (of at most :data:`KNOWN_LIMIT_BYTES`)
   whose every byte came from the host (an H2D copy, ``torch.tensor(..., device="npu")``, a copy
   or collective of such tensors) keeps a host copy of its values until a device kernel writes
   it. Reading it back (``.item()``, ``.cpu()``) returns those exact values. This is what
   DistributedDataParallel's checks need: its parameter count and shapes, and the bucket
   indices it broadcasts, travel H2D, through a collective and D2H unchanged. A functional op
   whose tensor inputs are all known (and not random) is computed from them on the host, so
   its small outputs are known too: attention masks, position ids and label masks that models
   derive from host-sent batches (``mask == 1``, ``mask.all()``, ``cumsum``) keep their values,
   and library control flow that tests them (Hugging Face's "is this mask all ones?") runs as
   it does with values. The device kernels are launched either way.
2. **Framework reads of computed values get a neutral placeholder.** A read of a value the
   device would have computed, made by framework code whose reads are bookkeeping with a
   known meaning (the modules in :data:`FRAMEWORK_READERS`: GradScaler's found-inf check,
   gradient clipping's finiteness check, DDP and torch.distributed, msprof's torch_npu shim),
   returns zeros: ``.item()`` gives ``0`` of the tensor's dtype (``0.0``, ``False``: "no
   inf/NaN found", "gradients finite", "norm within bounds"), a D2H copy gives a CPU tensor of
   the right shape and dtype filled with zeros. Each such read is counted in
   :data:`PLACEHOLDER_READS` by the reading module.
3. **Any other read fails** with :class:`~msprof_py.adapter.errors.NumericsNoneError`, as do
   ops whose output shape depends on values (``nonzero``, boolean-mask indexing ...). A read in
   the application's own code (``if loss.item() > x``, early stopping, printing a tensor) may
   steer its control flow, and no made-up number is neutral there: a placeholder would
   silently profile a different program than the one that runs with values. The error names
   the read, so the script can skip it in shapes-only mode.

In every case the host still synchronises with the device as it would with values: the D2H
copy (``.item()``'s 8-byte copy, a ``.cpu()``'s full copy) is a task on the timeline.
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

import torch

from msprof_py.adapter.errors import NumericsNoneError
from msprof_py.adapter.tensors import backing_storage

#: tensors of at most this many bytes keep the values the host wrote into them
KNOWN_LIMIT_BYTES = 1 << 20

#: modules (and their submodules) whose reads of computed values get placeholders
FRAMEWORK_READERS: tuple[str, ...] = (
    "torch.amp.grad_scaler",
    "torch.cuda.amp",
    "torch.nn.utils.clip_grad",
    "torch.nn.parallel",
    "torch.distributed",
    "msprof_py.adapter.torch_npu",
)

#: the adapter's own modules a read passes through (skipped when looking for the reader)
_PLUMBING = frozenset(
    {
        "msprof_py.adapter.backend",
        "msprof_py.adapter.copies",
        "msprof_py.adapter.kernels",
        "msprof_py.adapter.shapes_only",
        "msprof_py.adapter.tensors",
    }
)

#: placeholder reads so far, by the module that made them
PLACEHOLDER_READS: Counter[str] = Counter()


# ---- values the host put on the device --------------------------------------------------


def _on(storage: torch.UntypedStorage, like: torch.Tensor) -> torch.Tensor:
    """A CPU tensor over ``storage`` with ``like``'s dtype, sizes, strides and offset."""
    return torch.empty(0, dtype=like.dtype).set_(
        storage, like.storage_offset(), like.size(), like.stride()
    )


def known_view(t: torch.Tensor) -> torch.Tensor | None:
    """A CPU tensor aliasing the host-known values of npu tensor ``t``, or None if unknown."""
    shadow = getattr(t.untyped_storage(), "_npu_known", None)
    return None if shadow is None else _on(shadow, t)


def forget(target: object) -> None:
    """A device kernel wrote ``target`` (a tensor or a list of them): its values are unknown."""
    if isinstance(target, torch.Tensor):
        storage = target.untyped_storage()
        if hasattr(storage, "_npu_known"):
            del storage._npu_known  # type: ignore[attr-defined]
    elif isinstance(target, (list, tuple)):
        for t in target:
            forget(t)


def _covers_storage(t: torch.Tensor) -> bool:
    return (
        t.storage_offset() == 0
        and t.is_contiguous()
        and t.numel() * t.element_size() == backing_storage(t).nbytes()
    )


def writable_view(t: torch.Tensor) -> torch.Tensor | None:
    """A CPU tensor to write ``t``'s new values into, keeping them known; None when they
    cannot be (a partial write into unknown data, or a storage over the limit)."""
    storage = t.untyped_storage()
    shadow = getattr(storage, "_npu_known", None)
    if shadow is None:
        nbytes = backing_storage(t).nbytes()
        if nbytes > KNOWN_LIMIT_BYTES or not _covers_storage(t):
            return None
        shadow = torch.zeros(nbytes, dtype=torch.uint8).untyped_storage()  # never garbage
        storage._npu_known = shadow  # type: ignore[attr-defined]
    return _on(shadow, t)


def write_known(dst: torch.Tensor, values: torch.Tensor | None) -> None:
    """``dst`` now holds ``values`` (CPU, broadcastable), or unknown values if None."""
    view = None if values is None else writable_view(dst)
    if view is None:
        forget(dst)
    else:
        view.copy_(values)


def _known_arg(value: Any, is_npu: Any) -> tuple[bool, Any]:
    """(ok, host value) of one argument: npu tensors by their known values."""
    if isinstance(value, torch.Tensor):
        if not is_npu(value.device):
            return True, value
        known = known_view(value)
        return known is not None, known
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], torch.Tensor):
        pairs = [_known_arg(v, is_npu) for v in value]
        return all(ok for ok, _ in pairs), type(value)(v for _, v in pairs)
    return True, value


#: in-place ops whose result does not depend on the target's old values
_OVERWRITES = frozenset({"zero_", "fill_"})


def compute_known(
    op: torch._ops.OpOverload,
    args: tuple,
    kwargs: dict,
    is_npu: Any,
    writes: tuple[tuple[int, str], ...] = (),
) -> Any | None:
    """``op``'s result computed from the known values of its npu inputs, or None if some input
    is unknown (or the op is random). The result holds CPU tensors; an in-place or ``out=`` op
    updates the known values of what it writes (``writes``: its written (index, name) pairs),
    which an ``out=`` op or an overwriting one (``zero_``, ``fill_``) may start knowing."""
    if torch.Tag.nondeterministic_seeded in op.tags:
        return None
    overwrites = op._schema.name.split("::")[-1] in _OVERWRITES
    written = {i for i, name in writes if overwrites or name == "out"}
    written_names = {name for i, name in writes if overwrites or name == "out"}

    def resolve(value: Any, may_start: bool, name: str = "") -> tuple[bool, Any]:
        if may_start and isinstance(value, torch.Tensor) and is_npu(value.device):
            if name == "out":  # may be resized: computed into a fresh CPU tensor (returned)
                return True, torch.empty(0, dtype=value.dtype)
            view = known_view(value)
            view = writable_view(value) if view is None else view
            return view is not None, view
        return _known_arg(value, is_npu)

    host_args = []
    for i, a in enumerate(args):
        ok, v = resolve(a, i in written)
        if not ok:
            return None
        host_args.append(v)
    host_kwargs = {}
    for k, a in kwargs.items():
        ok, v = resolve(a, k in written_names, k)
        if not ok:
            return None
        host_kwargs[k] = v
    if "device" in host_kwargs:
        host_kwargs["device"] = torch.device("cpu")
    try:
        return op(*host_args, **host_kwargs)
    except (RuntimeError, NotImplementedError, TypeError, ValueError):
        return None  # the values stay unknown; the meta result stands


def remember(outputs: list[torch.Tensor | None], values: Any) -> None:
    """Make each npu output hold the matching known value (outputs in the order of the op's
    flattened tensor results); outputs without one, or over the limit, stay unknown."""
    flat: list[torch.Tensor] = []

    def collect(v: Any) -> None:
        if isinstance(v, torch.Tensor):
            flat.append(v)
        elif isinstance(v, (list, tuple)):
            for item in v:
                collect(item)

    collect(values)
    if len(flat) != len(outputs):
        return
    for out, value in zip(outputs, flat, strict=True):
        if out is not None and out.shape == value.shape and out.dtype == value.dtype:
            write_known(out, value)


# ---- reads of values the device computed ------------------------------------------------


def reader() -> str:
    """The module of the code that made the current read (the adapter's plumbing skipped)."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name not in _PLUMBING:
            return name
        frame = frame.f_back
    return ""


def _is_framework(module: str) -> bool:
    return any(module == m or module.startswith(m + ".") for m in FRAMEWORK_READERS)


def allow_placeholder(operation: str) -> None:
    """A read of computed values: return if its reader gets a placeholder (counted), raise
    :class:`NumericsNoneError` naming ``operation`` otherwise."""
    module = reader()
    if not _is_framework(module):
        raise NumericsNoneError(operation)
    PLACEHOLDER_READS[module] += 1
