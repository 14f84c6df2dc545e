"""`CoreState`: one block running on one core - its buffers' bytes, its timeline, its index.

Kernel API functions (DataCopy, Add, Mmad, SetFlag...) find the running block through
:func:`current` and dispatch through :meth:`CoreState.issue`, which turns tensor operands into
byte regions, applies the waits queues impose and schedules the instruction on the timeline.
"""

from __future__ import annotations

import contextvars
import os
import sys
from collections import deque
from collections.abc import Iterable, Sequence

import numpy as np

from msprof_py.kernels.chip import Buffer, Chip
from msprof_py.kernels.errors import KernelError
from msprof_py.kernels.tensors import GlobalTensor, LocalTensor
from msprof_py.kernels.timeline import Instr, Pipe, Timeline

Operand = LocalTensor | GlobalTensor
#: an operand and how many of its bytes the instruction touches
Access = tuple[Operand, int]

_CURRENT: contextvars.ContextVar[CoreState | None] = contextvars.ContextVar(
    "msprof_kernel_core", default=None
)


class CoreState:
    """The state of one block while its kernel body runs."""

    def __init__(
        self,
        chip: Chip,
        block_idx: int,
        block_dim: int,
        *,
        strict: bool = True,
        unit: str | None = None,
        sub_block_idx: int = 0,
    ) -> None:
        self.chip = chip
        self.block_idx = block_idx
        self.block_dim = block_dim
        #: None for a single-core block; "aic" or "aiv" for one sub-core of a split mix block
        #: (``launch(..., kernel_type="mix_aic_1_2")``), which owns only its side's buffers
        #: and pipes
        self.unit = unit
        #: which vector core of the block (0 / 1) for an "aiv" unit; 0 for the AIC
        self.sub_block_idx = sub_block_idx
        #: the cross-core flag mailbox of the block's sub-cores (set by the mix runner)
        self.group: object | None = None
        #: a single-core block's own cross-core flag tokens (flag id -> set times)
        self.cross_core_tokens: dict[int, deque[int]] = {}
        #: cycles dispatch stood stalled in CrossCoreWaitFlag (split mix blocks)
        self.cross_core_wait = 0
        self.timeline = Timeline(strict=strict, event_ids=chip.event_ids)
        self.memory: dict[Buffer, np.ndarray] = {
            buf: np.zeros(size, dtype=np.uint8) for buf, size in chip.capacity.items()
        }
        #: bytes of each buffer handed out so far (TPipe.InitBuffer / TIK tensors)
        self.used: dict[Buffer, int] = dict.fromkeys(chip.capacity, 0)
        #: True once a cube-side buffer or pipe is used (the block needs a cube core)
        self.uses_cube = False

    def issue(
        self,
        pipe: Pipe,
        name: str,
        cycles: int,
        *,
        reads: Sequence[Access] = (),
        writes: Sequence[Access] = (),
        nbytes: int = 0,
        detail: str = "",
    ) -> Instr:
        """Schedule one instruction that reads and writes the given operand bytes."""
        if self.unit is not None:
            self.check_side(pipe, name, (t for t, _ in (*reads, *writes)))
        waits: list[tuple[str, int]] = []
        for tensor, _ in (*reads, *writes):
            slot = getattr(tensor, "slot", None)
            if slot is not None and slot.pending is not None:
                waits.append(slot.pending)
            if isinstance(tensor, LocalTensor) and tensor.buffer in _CUBE_BUFFERS:
                self.uses_cube = True
        if pipe in (Pipe.M, Pipe.MTE1, Pipe.FIX):
            self.uses_cube = True
        instr = self.timeline.issue(
            pipe,
            name,
            cycles,
            nbytes=nbytes,
            reads=tuple(t.region(n) for t, n in reads),
            writes=tuple(t.region(n) for t, n in writes),
            not_before=waits,
            detail=detail,
        )
        instr.source = _kernel_line()
        for tensor, _ in reads:
            slot = getattr(tensor, "slot", None)
            if slot is not None:
                slot.last_pipe = pipe
        for tensor, _ in writes:
            slot = getattr(tensor, "slot", None)
            if slot is not None:
                slot.last_pipe = slot.last_writer = pipe
        return instr

    @property
    def unit_name(self) -> str:
        """``aic``, ``aiv0`` / ``aiv1`` for a sub-core of a split mix block, else ``""``."""
        if self.unit is None:
            return ""
        return "aic" if self.unit == "aic" else f"aiv{self.sub_block_idx}"

    def check_owns(self, buffer: Buffer, what: str) -> None:
        """Raise unless this sub-core has ``buffer`` (the AIC: L1 / L0A / L0B / L0C; an AIV:
        UB); a single-core block has every buffer."""
        if self.unit is None or buffer is Buffer.GM:
            return
        cube = buffer in _CUBE_BUFFERS
        if cube != (self.unit == "aic"):
            owner = "the AIC (cube core)" if cube else "the AIV (vector cores)"
            guard = "IsAic()" if cube else "IsAiv()"
            raise KernelError(
                f"{what} on {self.unit_name}: {buffer.value} belongs to {owner}; "
                f"guard that code with {guard}"
            )

    def check_side(self, pipe: Pipe, name: str, operands: Iterable[Operand]) -> None:
        """Raise when an instruction runs on the wrong sub-core of a split mix block."""
        if self.unit == "aic" and pipe is Pipe.V:
            raise KernelError(
                f"{name} on aic: the V pipe is on the AIV (vector cores); guard it with IsAiv()"
            )
        if self.unit == "aiv" and pipe in (Pipe.M, Pipe.MTE1, Pipe.FIX):
            raise KernelError(
                f"{name} on {self.unit_name}: the {pipe.value} pipe is on the AIC (cube core); "
                "guard it with IsAic()"
            )
        for tensor in operands:
            if isinstance(tensor, LocalTensor):
                self.check_owns(tensor.buffer, name)


_CUBE_BUFFERS = frozenset({Buffer.L1, Buffer.L0A, Buffer.L0B, Buffer.L0C})
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _kernel_line() -> str:
    """``file.py:line`` of the innermost caller outside this package (the kernel's code)."""
    frame = sys._getframe(2)
    while frame is not None and os.path.dirname(frame.f_code.co_filename) == _PACKAGE_DIR:
        frame = frame.f_back
    if frame is None:
        return ""
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


def current() -> CoreState:
    """The block whose kernel body is running; raises outside :func:`launch`."""
    core = _CURRENT.get()
    if core is None:
        raise KernelError("kernel API called outside a kernel: run the body with launch()")
    return core


def activate(core: CoreState | None) -> contextvars.Token:
    """Make ``core`` the running block (returns the token to restore the previous one)."""
    return _CURRENT.set(core)


def deactivate(token: contextvars.Token) -> None:
    """Restore the block that ran before :func:`activate`."""
    _CURRENT.reset(token)
