"""Split mix blocks: one AIC (cube core) and two AIVs (vector cores) per block, as on 910B.

``launch(kernel, n, *args, kernel_type="mix_aic_1_2")`` (Ascend C's
``KERNEL_TYPE_MIX_AIC_1_2``) runs the kernel body three times per block: once on the block's
AIC, once on each of its AIVs (``GetSubBlockIdx()`` 0 and 1). Each sub-core has its own pipes
(its own :class:`~msprof_py.kernels.timeline.Timeline`) and its own buffers: the AIC holds L1
/ L0A / L0B / L0C and the M, MTE1, FIX pipes; an AIV holds UB and the V pipe; both have S, MTE2
and MTE3. A cube instruction on an AIV (or a vector one on the AIC) is an error naming the
guard to add (``if IsAic():`` / ``if IsAiv():``). Cube and vector hand tiles over through GM
and order the hand-off with cross-core flags:

- ``CrossCoreSetFlag(flag_id, pipe)`` fires when ``pipe`` of the setting sub-core has finished
  what was issued to it before the set; the other side sees it ``CROSS_CORE_CYCLES`` later.
  Set on the AIC it reaches both AIVs; set on an AIV it reaches the AIC.
- ``CrossCoreWaitFlag(flag_id, pipe)`` holds ``pipe`` (S by default, which also stalls
  dispatch) until the flag arrived; on the AIC it needs the set of both AIVs (the 1:2 group
  synchronisation, Ascend C's mode 2). Flag ids 0-15.

The three bodies run as cooperative threads, one at a time, in a fixed order (AIC, AIV0, AIV1;
a body runs until it waits on a flag not yet set), so values and times are deterministic. When
every unfinished body waits on a flag no one will set, the launch fails with a one-line
``SyncError`` (the device would hang). GM accesses of different sub-cores are not race-checked:
the cross-core flags are what orders them.

On a single-core block (a launch without ``kernel_type``, or a coupled chip such as 910A where
one AI Core has both units) ``IsAic()`` and ``IsAiv()`` are both true, ``GetSubBlockNum()`` is 1
and a cross-core flag is an in-order flag of that core (its wait needs the set earlier in
program order; a kernel whose AIC side waits on its AIVs, such as the FlashAttention sample,
fails there with a one-line ``SyncError`` naming ``kernel_type``).

``CROSS_CORE_CYCLES`` [U]: no published figure was found for the AIC <-> AIV flag latency; 100
cycles is assumed (the GM round trip of the data itself is costed by the copies).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from msprof_py.kernels.core import CoreState, activate, current, deactivate
from msprof_py.kernels.errors import KernelError, SyncError
from msprof_py.kernels.timeline import Pipe

#: cycles from a cross-core SetFlag firing to the other side seeing it [U]
CROSS_CORE_CYCLES = 100
#: cross-core flag ids (0 .. CROSS_CORE_FLAG_IDS - 1) [U]
CROSS_CORE_FLAG_IDS = 16
#: the kernel_type values of a split mix launch
MIX_TYPES = ("mix_aic_1_2", "KERNEL_TYPE_MIX_AIC_1_2")
#: vector cores per cube core in a mix block (910B: 48 / 24)
AIV_PER_AIC = 2


class _Abort(BaseException):
    """Unwinds a waiting body when the launch gives up (another body failed or all hang)."""


class MixGroup:
    """The sub-cores of one split mix block and their cross-core flag mailboxes."""

    def __init__(self, cores: list[CoreState]) -> None:
        self.cores = cores
        self._inbox: dict[tuple[str, str, int], deque[int]] = {}
        self._cond = threading.Condition()
        self._turn: int | None = None
        self._waiting: dict[int, Callable[[], bool]] = {}
        self._done: set[int] = set()
        self._abort = False
        self._errors: list[tuple[int, BaseException]] = []
        for core in cores:
            core.group = self

    # ---- flags -------------------------------------------------------------------------------

    def post(self, sender: CoreState, flag_id: int, t: int) -> None:
        """A set on ``sender`` at cycle ``t``: the receivers' tokens arrive later."""
        arrive = t + CROSS_CORE_CYCLES
        receivers = [c for c in self.cores if (c.unit == "aic") != (sender.unit == "aic")]
        for r in receivers:
            key = (sender.unit_name, r.unit_name, flag_id)
            self._inbox.setdefault(key, deque()).append(arrive)

    def _senders(self, receiver: CoreState) -> list[str]:
        return [c.unit_name for c in self.cores if (c.unit == "aic") != (receiver.unit == "aic")]

    def ready(self, receiver: CoreState, flag_id: int) -> bool:
        """True when every sender's token for ``flag_id`` has reached ``receiver``."""
        return all(
            self._inbox.get((s, receiver.unit_name, flag_id)) for s in self._senders(receiver)
        )

    def take(self, receiver: CoreState, flag_id: int) -> int:
        """Consume the tokens (one per sender); returns the cycle the last one arrives."""
        keys = [(s, receiver.unit_name, flag_id) for s in self._senders(receiver)]
        return max(self._inbox[k].popleft() for k in keys)

    def block_until(self, receiver: CoreState, flag_id: int) -> None:
        """Yield the baton until ``flag_id``'s tokens are there (called by a body's thread)."""
        me = self.cores.index(receiver)
        with self._cond:
            if self.ready(receiver, flag_id):
                return
            self._waiting[me] = lambda: self.ready(receiver, flag_id)
            self._turn = None
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._turn == me or self._abort)
            self._waiting.pop(me, None)
            if self._abort:
                raise _Abort

    # ---- running the bodies --------------------------------------------------------------------

    def _body(self, i: int, kernel: Callable[..., Any], args: tuple[Any, ...]) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._turn == i or self._abort)
            if self._abort:
                self._finish(i)
                return
        token = activate(self.cores[i])
        try:
            kernel(*args)
        except _Abort:
            pass
        except BaseException as exc:  # re-raised by run() in the launching thread
            self._errors.append((i, exc))
        finally:
            deactivate(token)
            with self._cond:
                self._finish(i)

    def _finish(self, i: int) -> None:
        self._done.add(i)
        self._turn = None
        self._cond.notify_all()

    def run(self, kernel: Callable[..., Any], args: tuple[Any, ...]) -> None:
        """Run ``kernel(*args)`` on every sub-core (see module docstring); raises what a body
        raised, prefixed by its sub-core, or a SyncError when they all wait forever."""
        n = len(self.cores)
        threads = [
            threading.Thread(target=self._body, args=(i, kernel, args), daemon=True)
            for i in range(n)
        ]
        for t in threads:
            t.start()
        last = n - 1
        hang: str | None = None
        with self._cond:
            while len(self._done) < n and not self._errors:
                order = [(last + 1 + k) % n for k in range(n)]
                runnable = [
                    i
                    for i in order
                    if i not in self._done and (i not in self._waiting or self._waiting[i]())
                ]
                if not runnable:
                    hang = ", ".join(self.cores[i].unit_name for i in sorted(self._waiting))
                    break
                last = runnable[0]
                self._turn = last
                self._cond.notify_all()
                self._cond.wait_for(lambda: self._turn is None)
            self._abort = True
            self._cond.notify_all()
        for t in threads:
            t.join()
        if self._errors:
            i, exc = self._errors[0]
            if isinstance(exc, KernelError):
                raise type(exc)(f"{self.cores[i].unit_name}: {exc}") from None
            raise exc
        if hang is not None:
            raise SyncError(
                f"CrossCoreWaitFlag never satisfied on {hang}: no sub-core will set the flag "
                "(the device would hang here)"
            )


def make_group(chip: Any, block_idx: int, block_dim: int, *, strict: bool) -> MixGroup:
    """The AIC and the two AIVs of block ``block_idx``."""
    cores = [CoreState(chip, block_idx, block_dim, strict=strict, unit="aic")]
    cores += [
        CoreState(chip, block_idx, block_dim, strict=strict, unit="aiv", sub_block_idx=k)
        for k in range(AIV_PER_AIC)
    ]
    return MixGroup(cores)


# ---- kernel API ---------------------------------------------------------------------------------


def _check_flag(flag_id: int, what: str) -> None:
    if not 0 <= flag_id < CROSS_CORE_FLAG_IDS:
        raise SyncError(f"{what}: flag id {flag_id} out of range 0-{CROSS_CORE_FLAG_IDS - 1}")


def CrossCoreSetFlag(flag_id: int, pipe: Pipe | str = Pipe.S) -> None:
    """Tell the other side of the block (AIC <-> AIVs) that ``pipe``'s work so far is done."""
    core = current()
    _check_flag(flag_id, "CrossCoreSetFlag")
    p = Pipe(pipe)
    t = core.timeline.ready_time(p)
    core.timeline.mark(p, f"CrossCoreSetFlag({flag_id})", t)
    if isinstance(core.group, MixGroup):
        core.group.post(core, flag_id, t)
    else:
        core.cross_core_tokens.setdefault(flag_id, deque()).append(t)


def CrossCoreWaitFlag(flag_id: int, pipe: Pipe | str = Pipe.S) -> None:
    """Hold ``pipe`` (S: dispatch too) until the other side's matching set has arrived."""
    core = current()
    _check_flag(flag_id, "CrossCoreWaitFlag")
    p = Pipe(pipe)
    group = core.group
    if isinstance(group, MixGroup):
        group.block_until(core, flag_id)
        t = group.take(core, flag_id)
    else:
        pending = core.cross_core_tokens.get(flag_id)
        if not pending:
            fix = (
                "launch it with kernel_type='mix_aic_1_2' so the AIC and AIV sides run concurrently"
                if core.chip.split
                else f"{core.chip.name} has no split mix kernels: set each flag before its wait"
            )
            raise SyncError(
                f"CrossCoreWaitFlag({flag_id}) has no CrossCoreSetFlag before it on this "
                f"single-core block (launched without kernel_type): the device would hang "
                f"here; {fix}"
            )
        t = pending.popleft()
    tl = core.timeline
    if p is Pipe.S:
        # stalled: every pipe has drained and dispatch still waits for the flag
        core.cross_core_wait += max(0, t - tl.finish)
    tl.wait_until(p, t)
    if p is Pipe.S:
        tl.issue_clock = max(tl.issue_clock, t)
    tl.mark(p, f"CrossCoreWaitFlag({flag_id})", max(t, tl.pipe_free[p]))


def IsAic() -> bool:
    """True on the AIC of a split mix block, and on a single-core block (it has the cube)."""
    return current().unit in (None, "aic")


def IsAiv() -> bool:
    """True on an AIV of a split mix block, and on a single-core block (it has the vector
    unit)."""
    return current().unit in (None, "aiv")


def GetSubBlockIdx() -> int:
    """Which AIV of its block this body runs on (0 or 1); 0 on the AIC and single cores."""
    return current().sub_block_idx


def GetSubBlockNum() -> int:
    """AIVs splitting the vector work of a block: 2 on an AIV of a split mix block, else 1."""
    return AIV_PER_AIC if current().unit == "aiv" else 1
