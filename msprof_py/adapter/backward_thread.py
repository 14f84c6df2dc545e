"""The backward pass on the thread that called it, recorded as autograd's device thread.

PyTorch's autograd engine runs the backward of a device other than the CPU on a worker
thread of its own per device (``pt_autograd_0`` for npu:0), as torch_npu's backward runs on
the NPU's. On the simulated npu every op also computes its values with the CPU kernels, so
that thread runs CPU kernels too, and it gets its own OpenMP thread team. With two teams in
the process, libgomp counts more threads than cores and stops letting idle workers spin:
every parallel region of either thread then waits for its workers to wake (on the 2-core VM
a 256x256 add takes 55-80 us instead of 5-7 us, and the ResNet sample's npu step 17.6 ms
instead of 9.7 ms with two intra-op threads). No real device pays this: its backward thread
only launches kernels.

:func:`install` makes the npu's backward run on the thread that calls it
(``torch.autograd.set_multithreading_enabled(False)`` around each backward, as the CPU's
backward runs): one OpenMP team, as CPU eager has. What is recorded does not change: while a
thread runs a backward, what it records goes under its ident + 1 (:func:`current_ident`; a
thread ident is an aligned address, so ident + 1 is no other thread's), named
``pt_autograd_<device>``, the thread the real engine would have used, so the profile's thread
lanes and the analyses that tell the backward by its thread read it as before. The compiled
row sink, which writes the compiled per-op path's host ops too, reads the same ident
(``set_backward_thread``).

One backward runs at a time per process in this accounting: a backward started on another
thread while one runs is recorded under its own thread (its rows are not lost).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

#: the ident of the thread running a backward now (0: none)
_backward_ident = 0
#: what else keeps that ident (the compiled row sink, the compiled per-op path): setters
_listeners: list[Callable[[int], None]] = []
_installed = False


def current_ident() -> int:
    """The calling thread's ident as recorded: ident + 1 while it runs a backward."""
    ident = threading.get_ident()
    return ident + 1 if ident == _backward_ident else ident


def in_backward() -> bool:
    """Whether the calling thread runs a backward now (it records as the device thread)."""
    return _backward_ident != 0 and threading.get_ident() == _backward_ident


def device_thread_name() -> str:
    """The name PyTorch gives autograd's worker thread of the current npu device."""
    import torch

    index = torch.npu.current_device() if hasattr(torch, "npu") else 0
    return f"pt_autograd_{index}"


def add_listener(setter: Callable[[int], None]) -> None:
    """Keep ``setter`` told of the backward thread's ident (0 when none), now and on change."""
    _listeners.append(setter)
    setter(_backward_ident)


def _set(ident: int) -> None:
    global _backward_ident
    _backward_ident = ident
    for setter in _listeners:
        setter(ident)


@contextlib.contextmanager
def running_backward() -> Iterator[None]:
    """The calling thread runs a backward meanwhile (nested backwards keep the outer one)."""
    ident = threading.get_ident()
    outer = _backward_ident
    if outer not in (0, ident):  # another thread's backward: this one is recorded as is
        yield
        return
    _set(ident)
    try:
        yield
    finally:
        _set(outer)


def _on_calling_thread(run: Callable[..., Any]) -> Callable[..., Any]:
    def run_backward(*args: Any, **kwargs: Any) -> Any:
        import torch

        with running_backward(), torch.autograd.set_multithreading_enabled(False):
            return run(*args, **kwargs)

    run_backward.__wrapped__ = run  # type: ignore[attr-defined]
    return run_backward


#: set to "device" to keep torch's placement (backward on autograd's device thread)
PLACEMENT_ENV = "MSPROF_PY_BACKWARD_THREAD"


def install() -> None:
    """Run every backward on its calling thread from now on (once per process), unless
    ``MSPROF_PY_BACKWARD_THREAD=device`` keeps torch's placement."""
    global _installed
    if _installed or os.environ.get(PLACEMENT_ENV) == "device":
        return
    import torch.autograd
    import torch.autograd.graph

    wrapped = _on_calling_thread(torch.autograd.graph._engine_run_backward)
    torch.autograd.graph._engine_run_backward = wrapped
    torch.autograd._engine_run_backward = wrapped  # backward() and grad() call it by this name
    _installed = True
