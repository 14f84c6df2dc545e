"""``nn.Module`` conversions (``.to``, ``.npu()``, ``.half()`` ...) that keep shared tensors shared.

torch converts a module's parameters in place (``param.data = converted``) only when the old and
the new tensor have "compatible shallow-copy types", a C++ test that knows the built-in dense
backends but not PrivateUse1. For every conversion to, from or on the npu device it therefore
creates a *new* ``Parameter`` per module that holds the tensor. Two things break:

- **ties**: a parameter shared by two modules (an embedding and the LM head of every GPT- or
  BERT-style model) becomes two parameters, and training silently diverges from CPU;
- **identity**: an optimizer built before ``model.to(...)`` keeps the old tensors, where on CUDA
  it keeps working because the parameters are converted in place.

:func:`install` wraps ``nn.Module._apply`` (the one function all conversions go through). The
outermost call converts each distinct tensor once (a tensor shared by several modules gets one
converted tensor), then, where torch replaced a parameter by a new one, swaps the new contents
into the original ``Parameter`` object (``torch.utils.swap_tensors``) and puts that object back
into every module that held it. The result is what the CPU or CUDA conversion gives: the same
parameter objects, the same ties, grads converted with them. Where a swap is impossible (the
parameter has weak references or other owners of its C++ tensor), the modules share the new
parameter instead, so ties hold even then. Shared buffers stay shared as well.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

_STATE = threading.local()


def _held_tensors(
    root: nn.Module, recurse: bool
) -> tuple[list[tuple[nn.Module, str, nn.Parameter]], list[tuple[nn.Module, str, torch.Tensor]]]:
    """Every (module, name, parameter) and (module, name, buffer) slot the conversion visits."""
    modules = [m for _, m in root.named_modules(remove_duplicate=False)] if recurse else [root]
    params = [(m, key, p) for m in modules for key, p in m._parameters.items() if p is not None]
    buffers = [(m, key, b) for m in modules for key, b in m._buffers.items() if b is not None]
    return params, buffers


def _convert_once(fn: Callable[[torch.Tensor], torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``fn``, computed once per distinct input tensor (the input is kept alive with its id)."""
    done: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def converted(tensor: torch.Tensor) -> torch.Tensor:
        hit = done.get(id(tensor))
        if hit is not None and hit[0] is tensor:
            return hit[1]
        out = fn(tensor)
        done[id(tensor)] = (tensor, out)
        return out

    return converted


def _restore_parameters(params: list[tuple[nn.Module, str, nn.Parameter]]) -> None:
    """Put one parameter object back into every slot that held the same one before."""
    chosen: dict[int, nn.Parameter] = {}
    for module, key, original in params:
        current = module._parameters.get(key)
        if current is None or current is original:
            continue
        kept = chosen.get(id(original))
        if kept is None:
            kept = current
            try:
                torch.utils.swap_tensors(original, current)
                kept = original
            except RuntimeError:
                pass  # other owners of the tensor: share the new parameter instead
            chosen[id(original)] = kept
        module._parameters[key] = kept


def _restore_buffers(buffers: list[tuple[nn.Module, str, torch.Tensor]]) -> None:
    """Slots that shared a buffer before share one converted buffer after."""
    chosen: dict[int, torch.Tensor] = {}
    for module, key, original in buffers:
        current = module._buffers.get(key)
        if current is None:
            continue
        kept = chosen.setdefault(id(original), current)
        if kept is not current:
            module._buffers[key] = kept


def _wrap(original_apply: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
    @functools.wraps(original_apply)
    def _apply(self: nn.Module, fn: Callable[..., Any], recurse: bool = True) -> nn.Module:
        if getattr(_STATE, "converting", False):
            return original_apply(self, fn, recurse)
        params, buffers = _held_tensors(self, recurse)
        _STATE.converting = True
        try:
            result = original_apply(self, _convert_once(fn), recurse)
        finally:
            _STATE.converting = False
        _restore_parameters(params)
        _restore_buffers(buffers)
        return result

    _apply.__msprof_wrapped__ = original_apply  # type: ignore[attr-defined]
    return _apply


def install() -> None:
    """Wrap ``nn.Module._apply`` (once per process)."""
    if not hasattr(nn.Module._apply, "__msprof_wrapped__"):
        nn.Module._apply = _wrap(nn.Module._apply)  # type: ignore[method-assign]
