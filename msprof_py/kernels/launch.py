"""`launch(kernel, block_dim, *args)`: run a kernel body once per block and time the launch.

Each block runs the body with its own :class:`CoreState` (fresh on-chip buffers, its own
timeline); ``GetBlockIdx()`` tells the body which block it is. Array arguments become
:class:`GlobalTensor` objects over the caller's arrays (GM is written in place); other
arguments (tiling numbers, dataclasses) pass through unchanged.

Blocks are spread over the physical cores: vector cores for a vector-only kernel on a split
chip (48 on 910B), cube cores once a block uses L1 / L0 or the M, MTE1 or FIX pipe (24 on
910B), the AI Cores on a coupled chip. With more blocks than cores they run in waves: each
block starts on the core that frees first. Kernel duration = the latest core finish.

``kernel_type="mix_aic_1_2"`` (split chips): every block is an AIC plus two AIVs, each running
the body on its own pipes and buffers (see :mod:`msprof_py.kernels.mix`); the block ends when
its last sub-core does. Without it a block is one simulated core holding every buffer.
"""

from __future__ import annotations

import heapq
import inspect
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from msprof_py.kernels.chip import Chip
from msprof_py.kernels.core import CoreState, activate, deactivate
from msprof_py.kernels.errors import KernelError
from msprof_py.kernels.mix import MIX_TYPES, make_group
from msprof_py.kernels.results import BlockResult, CoreResult, LaunchResult, SubBlockResult
from msprof_py.kernels.tensors import GlobalTensor
from msprof_py.kernels.timeline import PIPES

#: callables told about every finished launch (the op profiler subscribes here)
_OBSERVERS: list[Callable[[LaunchResult], None]] = []


def add_observer(observer: Callable[[LaunchResult], None]) -> None:
    """Call ``observer(result)`` after every launch (until :func:`remove_observer`)."""
    _OBSERVERS.append(observer)


def remove_observer(observer: Callable[[LaunchResult], None]) -> None:
    """Stop telling ``observer`` about launches (no error if it was not added)."""
    if observer in _OBSERVERS:
        _OBSERVERS.remove(observer)


def _wrap_args(kernel: Callable[..., Any], args: tuple[Any, ...]) -> tuple[list[Any], dict]:
    try:
        names = list(inspect.signature(kernel).parameters)
    except (TypeError, ValueError):  # pragma: no cover - builtins
        names = []
    wrapped: list[Any] = []
    outputs: dict[str, np.ndarray] = {}
    for i, arg in enumerate(args):
        name = names[i] if i < len(names) else f"arg{i}"
        if isinstance(arg, np.ndarray):
            gm = GlobalTensor(arg, name)
            outputs[name] = arg
            wrapped.append(gm)
        elif isinstance(arg, GlobalTensor):
            outputs[arg.name] = arg.array
            wrapped.append(arg)
        else:
            wrapped.append(arg)
    return wrapped, outputs


def launch(
    kernel: Callable[..., Any],
    block_dim: int,
    *args: Any,
    chip: str | Chip | None = None,
    strict_sync: bool = True,
    name: str | None = None,
    kernel_type: str | None = None,
) -> LaunchResult:
    """Run ``kernel(*args)`` for ``block_dim`` blocks on ``chip`` (default ascend910b).

    ``strict_sync`` (the Ascend C rule): a data race between pipes raises; off, the later
    instruction waits instead (automatic synchronisation, as TIK does). ``kernel_type``:
    None (one core per block) or ``"mix_aic_1_2"`` (an AIC + 2 AIVs per block, split chips)."""
    the_chip = Chip.load(chip)
    if not isinstance(block_dim, int) or block_dim < 1:
        raise KernelError(f"launch: block_dim must be a positive integer, got {block_dim!r}")
    limit = the_chip.spec.limits.max_block_dim
    if block_dim > limit:
        raise KernelError(f"launch: block_dim {block_dim} exceeds the limit {limit}")
    split = kernel_type is not None
    if split and kernel_type not in MIX_TYPES:
        raise KernelError(f"launch: unknown kernel_type {kernel_type!r} (use 'mix_aic_1_2')")
    if split and not the_chip.split:
        raise KernelError(
            f"launch: kernel_type {kernel_type!r} needs a split chip (AIC + AIV cores); "
            f"{the_chip.name} has AI Cores with both units: launch without kernel_type"
        )
    wrapped, outputs = _wrap_args(kernel, args)
    states: list[CoreState | list[CoreState]] = []
    for b in range(block_dim):
        if split:
            group = make_group(the_chip, b, block_dim, strict=strict_sync)
            try:
                group.run(kernel, tuple(wrapped))
            except KernelError as exc:
                raise type(exc)(f"block {b}: {exc}") from None
            states.append(group.cores)
            continue
        core = CoreState(the_chip, b, block_dim, strict=strict_sync)
        token = activate(core)
        try:
            kernel(*wrapped)
        except KernelError as exc:
            raise type(exc)(f"block {b}: {exc}") from None
        finally:
            deactivate(token)
        states.append(core)
    result = _schedule(the_chip, states, name or getattr(kernel, "__name__", "kernel"), outputs)
    for observer in list(_OBSERVERS):
        observer(result)
    return result


def _sub_blocks(cores: list[CoreState]) -> list[SubBlockResult]:
    return [
        SubBlockResult(
            c.unit or "",
            c.sub_block_idx,
            c.timeline.finish,
            {p.value: c.timeline.busy[p] for p in PIPES},
            c.timeline.instructions,
            c.cross_core_wait,
        )
        for c in cores
    ]


def _schedule(
    chip: Chip,
    states: list[CoreState | list[CoreState]],
    name: str,
    outputs: dict[str, np.ndarray],
) -> LaunchResult:
    uses_cube = any(isinstance(s, list) or s.uses_cube for s in states)
    ncores = chip.cores_for(uses_cube)
    core_type = "mix" if uses_cube else "aiv"
    if not chip.split:
        core_type = "aicore"
    free = [(0, c) for c in range(ncores)]
    heapq.heapify(free)
    blocks: list[BlockResult] = []
    per_core: dict[int, CoreResult] = {}
    for s in states:
        start, core = heapq.heappop(free)
        if isinstance(s, list):
            subs = _sub_blocks(s)
            finish = max(sb.cycles for sb in subs)
            busy = {p.value: sum(sb.pipe_busy[p.value] for sb in subs) for p in PIPES}
            instrs = sorted((i for sb in subs for i in sb.instructions), key=lambda i: i.start)
            waits = sum(c.timeline.implicit_waits for c in s)
            block_idx = s[0].block_idx
        else:
            subs, finish, instrs = [], s.timeline.finish, s.timeline.instructions
            busy = {p.value: s.timeline.busy[p] for p in PIPES}
            waits, block_idx = s.timeline.implicit_waits, s.block_idx
        end = start + finish
        heapq.heappush(free, (end, core))
        blocks.append(BlockResult(block_idx, core, start, end, busy, instrs, waits, subs))
        cr = per_core.setdefault(core, CoreResult(core, [], dict.fromkeys(busy, 0), 0))
        cr.blocks.append(block_idx)
        cr.finish = max(cr.finish, end)
        # a split block's unit pipes are separate: the core's figure is its busiest unit's
        unit_busy = {p: max(sb.pipe_busy[p] for sb in subs) for p in busy} if subs else busy
        for p, c in unit_busy.items():
            cr.pipe_busy[p] += c
    total = max((b.end for b in blocks), default=0)
    return LaunchResult(
        name=name,
        chip=chip,
        block_dim=len(states),
        core_type=core_type,
        cores=ncores,
        waves=math.ceil(len(states) / ncores),
        total_cycles=total,
        blocks=blocks,
        core_results=[per_core[c] for c in sorted(per_core)],
        outputs=outputs,
    )
