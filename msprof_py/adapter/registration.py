"""Registering ``npu`` as torch's PrivateUse1 device: name, device module, guard and hooks."""

from __future__ import annotations

import atexit
import time
from pathlib import Path

import torch


class _DeviceGuard(torch._C._acc.DeviceGuard):
    """The device guard torch asks for when switching devices: one device, npu:0."""

    def type_(self) -> torch._C._autograd.DeviceType:
        return torch._C._autograd.DeviceType.PrivateUse1


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    """Answers torch's questions about the backend."""

    def is_available(self) -> bool:
        return True

    def has_primary_context(self, dev_id: int) -> bool:
        return True

    def is_built(self) -> bool:
        return True


def _skip_in_dynamo(*functions: object) -> None:
    """Let Dynamo run ``functions`` without compiling them: torch calls the guard back from C
    while Dynamo traces (``torch.accelerator.current_stream``), and Dynamo, its frame hook
    still set, would try to compile the callback and log a graph break for every compiled
    frame. Uses the C hook Dynamo's own ``skip_code`` uses, so Dynamo is not imported here."""
    frames = torch._C._dynamo.eval_frame
    skip = frames._FrameExecStrategy(frames._FrameAction.SKIP, frames._FrameAction.DEFAULT)
    for fn in functions:
        frames.set_code_exec_strategy(fn.__code__, skip)  # type: ignore[attr-defined]


def _register_compiled_guard() -> bool:
    """Register the compiled guard and hooks (``native/device_guard.cpp``) where the compiled
    module is built; whether the guard is now the compiled one.

    torch's Python guard takes the GIL and calls ``_DeviceGuard.type_`` for every question,
    among them ``getStream``, which torch declares noexcept: a KeyboardInterrupt pending at
    that call, or an autograd thread asking while Python exits, aborts the process ("terminate
    called without an active exception"). The compiled one answers without Python."""
    from msprof_py.adapter import native

    module = native.load()
    return module is not None and bool(module.register_npu_device())


#: how long the interpreter's exit waits for autograd's device thread (see below)
AUTOGRAD_SETTLE_S = 0.02


def _let_autograd_threads_settle() -> None:
    """At exit, before Python finalizes: give autograd's npu device thread the GIL for a moment.

    torch keeps a Python object (the ``contextvars`` context it stashes for each backward) in
    every graph task's thread-local state, and the device thread that ran the task may drop
    the task's last reference just after ``backward()`` returned to the caller. If the script
    ends right then, that thread asks for the GIL while Python finalizes, which ends it with
    ``pthread_exit`` inside a noexcept frame: the process aborts ("terminate called without
    an active exception", about one run in eight of a script that exits after a backward, on
    a loaded machine). Sleeping here releases the GIL so that the thread can let go first;
    a process that never ran a backward on npu has no such thread and does not wait."""
    if autograd_device_threads_started():
        time.sleep(AUTOGRAD_SETTLE_S)


def autograd_device_threads_started() -> bool:
    """Whether autograd's device threads (``pt_autograd_<n>``, which torch starts at the first
    backward through a device other than the CPU) exist; True where threads cannot be
    listed (not Linux), or one ended while they were being read."""
    try:
        names = [(task / "comm").read_text() for task in Path("/proc/self/task").iterdir()]
    except OSError:
        return True
    return any(name.startswith("pt_autograd") for name in names)


def register_device() -> None:
    """Name PrivateUse1 ``npu`` and attach the device guard and hooks (once per process): the
    compiled ones where the compiled module is built, else :class:`_DeviceGuard` and
    :class:`_Hooks`.

    The device module (``torch.npu``) is registered by the caller afterwards: it refers to
    ``torch.device("npu")``, which exists only after the rename.
    """
    torch.utils.rename_privateuse1_backend("npu")
    torch.utils.generate_methods_for_privateuse1_backend()
    # registered first, so it runs after every exit handler registered later (msprof's flush)
    atexit.register(_let_autograd_threads_settle)
    if _register_compiled_guard():
        return
    _skip_in_dynamo(
        _DeviceGuard.type_, _Hooks.is_available, _Hooks.has_primary_context, _Hooks.is_built
    )
    torch._C._acc.register_python_privateuseone_hook(_Hooks())
    torch._C._acc.register_python_privateuseone_device_guard(_DeviceGuard())
