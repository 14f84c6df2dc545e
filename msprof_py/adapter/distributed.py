"""The ``hccl`` process-group backend: collectives over gloo, costed as HCCL tasks.

    import msprof_py.adapter
    import msprof_py.adapter.distributed

    msprof_py.adapter.install()
    msprof_py.adapter.distributed.register()   # idempotent
    dist.init_process_group("hccl")             # under torchrun (or init_method, rank, world_size)

Values move between the ranks' processes through a private gloo process group working on the
host views of the npu tensors (CPU tensors pass through as they are). Time moves on each rank's
simulated device: every collective is ONE HCCL task on a communication stream of its own (one
per process group), ordered after the work queued so far on the current stream, as HCCL orders
it with a notify record/wait:

1. record an event on the current stream, make the communication stream wait for it;
2. exchange every rank's ready time (the latest of the communication stream's tail, that event
   and the host's launch) with a small gloo all-reduce(MAX); the HCCL task begins on each rank
   when that rank is ready and transfers when the slowest rank is ready (``peers_ready``): a
   fast rank waits for a late one inside its task (HCCL's notify wait, recorded as
   ``notify_wait_ns``), and two ranks that did the same work see the same start and end;
3. submit the HCCL task, costed by :func:`~msprof_py.device.collectives.collective_cost` for
   the collective's bytes (all-reduce: the tensor; all-gather: the gathered output;
   reduce-scatter: the input; broadcast: the tensor) and the world size, then record a
   completion event on the communication stream.

``Work.wait()`` waits (in real time) for the values and makes the *current* stream wait for the
completion event: the host is not blocked in simulated time, so a later ``torch.npu.synchronize()``
or ``.item()`` is what waits for the collective, as on a real NPU. Collectives launched during a
backward pass (DistributedDataParallel's gradient all-reduces) also make the current stream wait
at the end of that backward pass, where DDP consumes the results (DDP waits on the Work's future,
which cannot reach the device), so gradient communication overlaps backward compute on the
timeline and the optimizer step waits for it. ``barrier()`` also blocks the host until the
barrier's HCCL task has finished, which aligns the ranks' host clocks.

The ready-time exchange also carries the collective's kind and size: ranks that call different
collectives get an error rather than a hang or wrong values. A failed peer surfaces as gloo's
error (within the process group's timeout) from ``wait()`` and from the Work's future.

Every rank's tensors live on ``npu:0`` of its own process; ``torch.npu.current_device()``
reports the local rank (set when the group is created, if the script has not chosen a device).
"""

from __future__ import annotations

import atexit
import functools
import os
import sys
import tempfile
import time
import weakref
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import (
    AllgatherOptions,
    AllreduceCoalescedOptions,
    AllreduceOptions,
    BroadcastOptions,
    GatherOptions,
    ReduceOptions,
    ReduceScatterOptions,
    ScatterOptions,
)

from msprof_py.adapter import backend, formats, runtime, shapes_only
from msprof_py.adapter.runtime import AdapterState
from msprof_py.adapter.tensors import host_view, storage_format
from msprof_py.device.collectives import CollectiveOp, collective_cost
from msprof_py.device.engine import Event, Stream

__all__ = ["BACKEND", "HcclWork", "ProcessGroupHCCL", "is_registered", "register"]

#: the backend's name, as scripts pass it to ``init_process_group``
BACKEND = "hccl"

_REGISTERED = False


class _Pending:
    """Lives as long as a callback attached to a gloo future (its closure holds it)."""

    __slots__ = ("__weakref__", "failed")

    def __init__(self) -> None:
        self.failed = False


#: callbacks attached to gloo futures that gloo's threads have not released yet
_PENDING: weakref.WeakSet[_Pending] = weakref.WeakSet()

#: collective kinds, for the cross-rank consistency check of the ready-time exchange
_KINDS = {
    "allreduce": 1,
    "broadcast": 2,
    "allgather": 3,
    "reducescatter": 4,
    "barrier": 5,
    "reduce": 6,
    "gather": 7,
    "scatter": 8,
}
#: reduce ops gloo has no kernel for, done as SUM followed by a division by the world size
_AVG = dist.ReduceOp.AVG


#: what DDP's C++ logger prints once for a device without a registered timer
TIME_STATS_WARNING = "Time stats are currently only collected for CPU and CUDA devices"
#: logger calls whose stderr is screened for that line before it is known to be printed
_SCREENED_CALLS = 32


class NpuDdpLogger:
    """DDP's C++ logger for a module on the npu, without its one timer warning.

    Every DDP forward calls ``set_runtime_stats_and_log``: it records the unused parameters
    and rebuilt buckets (``_get_ddp_logging_data()``), then, for a device without a timer
    (only CPU and CUDA register one, in a C++ registry without a Python API), prints "Time
    stats are currently only collected for CPU and CUDA devices" once, on stderr through c10
    logging, past Python's warning filters. The call runs as it is, with stderr screened for
    exactly that line until it has been printed (every other line passes through); later calls
    go straight to the logger. Everything else goes to the real logger (:attr:`logger`)."""

    _warned = False
    _screened = 0

    def __init__(self, logger: Any) -> None:
        self.logger = logger

    def set_runtime_stats_and_log(self) -> None:
        """The logger's own call, screened for the timer warning (see the class)."""
        cls = NpuDdpLogger
        if cls._warned or cls._screened >= _SCREENED_CALLS:
            self.logger.set_runtime_stats_and_log()
            return
        cls._screened += 1
        printed = _stderr_of(self.logger.set_runtime_stats_and_log)
        kept = [
            line for line in printed.splitlines(keepends=True) if TIME_STATS_WARNING not in line
        ]
        if len(kept) < len(printed.splitlines()):
            cls._warned = True
        if kept:
            os.write(2, "".join(kept).encode(errors="replace"))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.logger, name)


def _stderr_of(call: Callable[[], Any]) -> str:
    """Run ``call`` with file descriptor 2 sent to a temporary file; return what it wrote."""
    sys.stderr.flush()
    with tempfile.TemporaryFile() as capture:
        saved = os.dup(2)
        try:
            os.dup2(capture.fileno(), 2)
            call()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        capture.seek(0)
        return capture.read().decode(errors="replace")


def _quiet_ddp_logger() -> None:
    """Give every DDP module on the npu an :class:`NpuDdpLogger` (idempotent)."""
    from torch.nn.parallel import DistributedDataParallel

    original = DistributedDataParallel.__init__
    if getattr(original, "_msprof_py", False):
        return

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        logger = getattr(self, "logger", None)
        if logger is not None and any(p.device.type == "npu" for p in self.module.parameters()):
            self.logger = NpuDdpLogger(logger)

    __init__._msprof_py = True  # type: ignore[attr-defined]
    DistributedDataParallel.__init__ = __init__  # type: ignore[method-assign]


def register() -> None:
    """Register the ``hccl`` backend with ``torch.distributed`` (idempotent).

    The npu adapter must be installed first (``msprof_py.adapter.install()``).
    """
    global _REGISTERED
    runtime.state()  # raises if the adapter is not installed
    if _REGISTERED and BACKEND.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND, _create, extended_api=False, devices=["npu", "cpu"])
    _quiet_ddp_logger()
    atexit.register(_drain_callbacks)
    _REGISTERED = True


def is_registered() -> bool:
    """True once :func:`register` has run in this process."""
    return _REGISTERED


def _create(store: dist.Store, rank: int, world_size: int, timeout: timedelta) -> ProcessGroupHCCL:
    """``init_process_group("hccl")`` / ``new_group(backend="hccl")`` creates groups here."""
    _select_local_device(rank, world_size)
    return ProcessGroupHCCL(store, rank, world_size, timeout)


def _select_local_device(rank: int, world_size: int) -> None:
    """Make ``torch.npu.current_device()`` the local rank, as a launcher-aware script would.

    torchrun sets LOCAL_RANK and LOCAL_WORLD_SIZE; ``mp.spawn`` sets neither, and then every
    process is taken to be on this server (local rank = rank). The device index is only what
    ``torch.npu.current_device()`` reports: tensors always live on ``npu:0`` in-process.
    """
    if dist.is_initialized():  # a subgroup: the default group chose the device already
        return
    if "LOCAL_WORLD_SIZE" not in os.environ:
        # torch.npu.device_count() reads it: set_device(local_rank) must be accepted
        os.environ["LOCAL_WORLD_SIZE"] = str(world_size)
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    npu = getattr(torch, "npu", None)
    if npu is None or local_rank == 0:
        return
    if npu.current_device() == 0 and 0 <= local_rank < npu.device_count():
        npu.set_device(local_rank)


def _nbytes(tensors: Sequence[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


class _Unwrapper:
    """Host views of a collective's npu tensors (CPU tensors pass through).

    With numerics "none" a view is a CPU view of the tensor's host-known values where it has
    them (see :mod:`msprof_py.adapter.shapes_only`); an output gets fresh host memory for the
    values to arrive in. The collective moves values only when every rank knows all of its
    inputs; otherwise the tensors it writes become unknown.
    """

    def __init__(self, meta: bool) -> None:
        self.meta = meta
        self.npu: list[torch.Tensor] = []
        #: npu tensors the collective writes (outputs and in-place tensors)
        self.written: list[torch.Tensor] = []
        #: with numerics "none": every npu view holds host values
        self.known = True

    def __call__(self, t: torch.Tensor, output: bool = False) -> torch.Tensor:
        if t.device.type != "npu":
            return t
        self.npu.append(t)
        self.written.append(t)  # in-place collectives write their inputs too
        if not self.meta:
            return host_view(t)
        view = shapes_only.writable_view(t) if output else shapes_only.known_view(t)
        if view is None:
            self.known = False
            return host_view(t)
        return view

    def many(self, tensors: Sequence[torch.Tensor], output: bool = False) -> list[torch.Tensor]:
        return [self(t, output) for t in tensors]

    def nested(
        self, lists: Sequence[Sequence[torch.Tensor]], output: bool = False
    ) -> list[list[torch.Tensor]]:
        return [self.many(ts, output) for ts in lists]

    @property
    def on_device(self) -> bool:
        return bool(self.npu)

    @property
    def values(self) -> bool:
        """False when some npu tensor holds shapes only (numerics="none"): nothing to send."""
        return not (self.meta and self.npu and not self.known)

    def unknown_results(self) -> None:
        """The collective ran without values: what it wrote is unknown to the host."""
        shapes_only.forget(self.written)


class HcclWork(dist.Work):
    """A collective in flight: its future yields the caller's tensors, its ``wait()`` makes the
    current npu stream wait for the collective's HCCL task."""

    def __init__(
        self,
        future: torch.futures.Future,
        done: Event | None,
        *,
        host_sync: bool = False,
        pending: weakref.ref[_Pending] | None = None,
    ) -> None:
        super().__init__()
        self._future = future
        #: the gloo callback's marker (see :func:`_until_released`)
        self._pending = pending
        self._done = done
        self._host_sync = host_sync
        #: ids of the streams already made to wait for this collective
        self._waited: set[int] = set()

    # ---- device side ----------------------------------------------------------------------

    def _wait_on_device(self) -> None:
        """Make the current stream wait for the HCCL task (and the host, for a barrier)."""
        if self._future.done():
            _until_released(self._pending)
        if self._done is None:
            return
        state = runtime.state()
        engine = state.npu.engine
        state.enter()
        try:
            if state.stream.stream_id not in self._waited:
                self._waited.add(state.stream.stream_id)
                engine.wait_event(state.stream, self._done)
            if self._host_sync:
                engine.synchronize_event(self._done)
                self._host_sync = False
        finally:
            state.leave()

    # ---- torch.distributed.Work -----------------------------------------------------------

    def wait(self, timeout: timedelta | None = None) -> bool:
        """Wait for the values (raising a peer's failure), then order the device after it."""
        self._future.wait()
        self._wait_on_device()
        return True

    def block_current_stream(self) -> None:
        """Same as :meth:`wait` (the values must be there before the host reads them)."""
        self.wait()

    def synchronize(self) -> None:
        self.wait()

    def get_future(self) -> torch.futures.Future:
        return self._future

    def is_completed(self) -> bool:
        return self._future.done()

    def is_success(self) -> bool:
        if not self._future.done():
            return False
        try:
            self._future.value()
        except Exception:
            return False
        return True

    def exception(self) -> BaseException | None:
        if not self._future.done():
            return None
        try:
            self._future.value()
        except Exception as exc:
            return exc
        return None

    def result(self) -> list[torch.Tensor]:
        value = self._future.wait()
        return value if isinstance(value, list) else [value]


def _finished(value: Any) -> torch.futures.Future:
    future: torch.futures.Future = torch.futures.Future()
    future.set_result(value)
    return future


def _after(
    work: dist.Work, value: Any, finish: Callable[[], None] | None = None
) -> tuple[torch.futures.Future, weakref.ref[_Pending] | None]:
    """A future completing with ``value`` when gloo's ``work`` has, raising what gloo raised;
    and a weak reference to the marker its callback holds (None when no callback was attached),
    for :func:`_until_released`.

    The callback runs on a gloo thread: it touches host memory only, never the device. It
    moves the value and the future out of its boxes as it completes the future, so that once
    gloo's thread has dropped it, nothing there refers to the collective's tensors: the main
    thread drops the last reference, and frees them in program order.
    """

    pending = _Pending()
    try:
        gloo_future = work.get_future()
    except RuntimeError:  # a gloo work without a future: wait for it here
        work.wait()
        if finish is not None:
            finish()
        return _finished(value), None
    result: torch.futures.Future = torch.futures.Future()
    future_box, value_box = [result], [value]

    def done(f: torch.futures.Future) -> None:
        out, values = future_box.pop(), value_box.pop()
        try:
            f.wait()  # re-raises a peer's failure (without it an error would be swallowed)
            if finish is not None:
                finish()
        except BaseException as exc:
            pending.failed = True  # its traceback keeps this callback alive: do not wait for it
            out.set_exception(exc)
            return
        out.set_result(values)

    _PENDING.add(pending)
    gloo_future.add_done_callback(done)
    return result, weakref.ref(pending)


def _until_released(pending: weakref.ref[_Pending] | None, timeout_s: float = 1.0) -> None:
    """Wait (real time, briefly) until gloo's thread has dropped the callback that delivered a
    collective's values. The callback holds the collective's tensors, and whichever thread
    drops the last reference frees them: without this wait a free fell on gloo's thread or on
    the main thread by timing, and the memory rows of a deterministic run changed order from
    run to run. A callback that raised is kept alive by its traceback: no wait for it."""
    if pending is None:
        return
    deadline = time.monotonic() + timeout_s
    while True:
        marker = pending()
        if marker is None or marker.failed or time.monotonic() > deadline:
            return
        del marker  # a strong reference here would keep it alive
        time.sleep(0)  # lets gloo's thread take the GIL and drop the callback


def _drain_callbacks(timeout_s: float = 10.0) -> None:
    """At exit, give gloo's threads the time to release the callbacks they ran.

    A gloo thread completes a future (waking the main thread) before it drops the callback; if
    the interpreter is already finalizing then, dropping it (which takes the GIL) aborts the
    process ("terminate called without an active exception"). The wait ends as soon as every
    callback is released; its bound is generous because a loaded machine may not schedule
    gloo's thread for seconds.
    """
    deadline = time.monotonic() + timeout_s
    while any(not p.failed for p in list(_PENDING)) and time.monotonic() < deadline:
        time.sleep(0.001)  # releases the GIL


def _average(views: Sequence[torch.Tensor], world_size: int) -> Callable[[], None]:
    def finish() -> None:
        for v in views:
            if v.is_floating_point() or v.is_complex():
                v.div_(world_size)
            else:
                v.copy_(torch.div(v, world_size, rounding_mode="trunc"))

    return finish


def _in_backward() -> bool:
    return torch._C._current_graph_task_id() != -1


class ProcessGroupHCCL(dist.ProcessGroup):
    """A process group whose collectives run over gloo and are costed as HCCL tasks."""

    def __init__(self, store: dist.Store, rank: int, world_size: int, timeout: timedelta) -> None:
        super().__init__(rank, world_size)
        self._gloo = dist.ProcessGroupGloo(store, rank, world_size, timeout)
        self._timeout = timeout
        self._rank = rank
        self._world_size = world_size
        state = runtime.state()
        self._npu = state.npu
        #: the stream this group's HCCL tasks run on
        self.comm_stream: Stream = state.npu.engine.create_stream()

    # ---- identity -------------------------------------------------------------------------

    def getBackendName(self) -> str:  # the C++ method name the trampoline looks up
        return BACKEND

    def _get_backend_name(self) -> str:
        return BACKEND

    def _get_backend(self, device: Any = None) -> dist.ProcessGroupGloo:
        """The backend torch asks for (e.g. ``init_process_group(device_id=...)``): the gloo
        group that moves the values (it does not split groups eagerly)."""
        return self._gloo

    @property
    def gloo(self) -> dist.ProcessGroupGloo:
        """The private gloo group that moves the values."""
        return self._gloo

    # ---- the common path ------------------------------------------------------------------

    def _exchange(
        self, ready_ns: int, kind: int, nbytes: int, timeout: timedelta, known: bool = True
    ) -> tuple[int, bool]:
        """All ranks' latest ready time, and whether every rank has the values to move
        (``known``: False where numerics "none" left an input without values); raise when the
        ranks called different collectives."""
        probe = torch.tensor(
            [ready_ns, kind, -kind, nbytes, -nbytes, -int(known)], dtype=torch.int64
        )
        opts = AllreduceOptions()
        opts.reduceOp = dist.ReduceOp.MAX
        opts.timeout = timeout
        self._gloo.allreduce([probe], opts).wait()
        latest, kind_max, kind_min, bytes_max, bytes_min, unknown = probe.tolist()
        if kind_max != -kind_min or bytes_max != -bytes_min:
            names = {v: k for k, v in _KINDS.items()}
            raise RuntimeError(
                f"hccl: ranks called different collectives (this rank: {names.get(kind)} of "
                f"{nbytes} B; others: {names.get(kind_max)}/{names.get(-kind_min)}, "
                f"{bytes_max}/{-bytes_min} B)"
            )
        return latest, unknown == -1

    def _launch(
        self,
        name: str,
        cost_op: CollectiveOp,
        nbytes: int,
        unwrap: _Unwrapper,
        gloo_call: Callable[[], dist.Work],
        value: Any,
        opts: Any,
        *,
        finish: Callable[[], None] | None = None,
        barrier: bool = False,
    ) -> HcclWork:
        """Cost the collective on the device, start it in gloo and wrap the result."""
        state = runtime.state()
        timeout = _timeout_of(opts, self._timeout)
        on_device = unwrap.on_device or barrier
        state.enter()
        try:
            ready = self._arrive(state, unwrap.npu) if on_device else 0
            arrival, everywhere = self._exchange(
                ready, _KINDS[name], nbytes, timeout, known=unwrap.values
            )
            done = self._submit(state, name, cost_op, nbytes, ready, arrival) if on_device else None
        except BaseException:
            unwrap.unknown_results()  # no values arrive in the outputs' host memory
            raise
        finally:
            state.leave()
        pending = None
        if everywhere:
            future, pending = _after(gloo_call(), value, finish)
        else:  # shapes only on some rank: no values to move
            unwrap.unknown_results()
            future = _finished(value)
        work = HcclWork(future, done, host_sync=barrier, pending=pending)
        if done is not None and _in_backward():
            # DDP consumes gradient all-reduces through the future, at the end of backward
            torch.autograd.Variable._execution_engine.queue_callback(work._wait_on_device)
        return work

    def _arrive(self, state: AdapterState, tensors: Sequence[torch.Tensor]) -> int:
        """Order the communication stream after the current stream; return the ready time."""
        for t in tensors:  # HCCL works on ND data
            if storage_format(t) is not None:
                backend.transdata(state, t, formats.ND, retag=False)
        engine = state.npu.engine
        ready = engine.create_event()
        engine.record_event(ready, state.stream)
        engine.wait_event(self.comm_stream, ready)
        assert ready.recorded_ns is not None
        launch = engine.host_ns + engine.spec.dispatch.api_call_ns
        return max(self.comm_stream.tail_ns, ready.recorded_ns, launch)

    def _submit(
        self,
        state: AdapterState,
        name: str,
        cost_op: CollectiveOp,
        nbytes: int,
        ready: int,
        arrival: int,
    ) -> Event:
        engine = state.npu.engine
        cost = collective_cost(state.npu.spec.hccl, cost_op, nbytes, self._world_size)
        engine.submit_collective(
            self.comm_stream, cost, name=f"hcom_{name}_", not_before=ready, peers_ready=arrival
        )
        done = engine.create_event()
        engine.record_event(done, self.comm_stream)
        return done

    def _unwrapper(self) -> _Unwrapper:
        return _Unwrapper(runtime.state().meta)

    # ---- collectives ----------------------------------------------------------------------

    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> HcclWork:
        opts = _allreduce_options(opts)
        unwrap = self._unwrapper()
        views = unwrap.many(tensors)
        gloo_opts, finish = self._reduce_op(opts, AllreduceOptions, views)
        nbytes = _nbytes(tensors[:1])
        return self._launch(
            "allreduce",
            CollectiveOp.ALL_REDUCE,
            nbytes,
            unwrap,
            lambda: self._gloo.allreduce(views, gloo_opts),
            tensors,
            opts,
            finish=finish,
        )

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any = None) -> HcclWork:
        opts = opts if opts is not None else AllreduceCoalescedOptions()
        unwrap = self._unwrapper()
        views = unwrap.many(tensors)
        gloo_opts, finish = self._reduce_op(opts, AllreduceCoalescedOptions, views)
        return self._launch(
            "allreduce",
            CollectiveOp.ALL_REDUCE,
            _nbytes(tensors),
            unwrap,
            lambda: self._gloo.allreduce_coalesced(views, gloo_opts),
            tensors,
            opts,
            finish=finish,
        )

    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> HcclWork:
        if opts is None:
            opts = BroadcastOptions()
        elif isinstance(opts, int):  # pg.broadcast(tensors, root)
            root, opts = opts, BroadcastOptions()
            opts.rootRank = root
        unwrap = self._unwrapper()
        views = unwrap.many(tensors)
        return self._launch(
            "broadcast",
            CollectiveOp.BROADCAST,
            _nbytes(tensors[:1]),
            unwrap,
            lambda: self._gloo.broadcast(views, opts),
            tensors,
            opts,
        )

    def allgather(
        self,
        output_tensors: list[list[torch.Tensor]],
        input_tensors: list[torch.Tensor],
        opts: Any = None,
    ) -> HcclWork:
        opts = opts if opts is not None else AllgatherOptions()
        unwrap = self._unwrapper()
        outs = unwrap.nested(output_tensors, output=True)
        ins = unwrap.many(input_tensors)
        return self._launch(
            "allgather",
            CollectiveOp.ALL_GATHER,
            _nbytes(output_tensors[0]) if output_tensors else 0,
            unwrap,
            lambda: self._gloo.allgather(outs, ins, opts),
            output_tensors,
            opts,
        )

    def all_gather_single(
        self, output: torch.Tensor, input: torch.Tensor, opts: Any = None
    ) -> HcclWork:
        """``all_gather_into_tensor``: the ranks' inputs concatenated into ``output``."""
        opts = opts if opts is not None else AllgatherOptions()
        unwrap = self._unwrapper()
        out, inp = unwrap(output, output=True), unwrap(input)
        return self._launch(
            "allgather",
            CollectiveOp.ALL_GATHER,
            _nbytes([output]),
            unwrap,
            lambda: self._gloo._allgather_base(out, inp, opts),
            [output],
            opts,
        )

    _allgather_base = all_gather_single

    def reduce_scatter(
        self,
        output_tensors: list[torch.Tensor],
        input_tensors: list[list[torch.Tensor]],
        opts: Any = None,
    ) -> HcclWork:
        opts = opts if opts is not None else ReduceScatterOptions()
        unwrap = self._unwrapper()
        outs = unwrap.many(output_tensors, output=True)
        ins = unwrap.nested(input_tensors)
        gloo_opts, finish = self._reduce_op(opts, ReduceScatterOptions, outs)
        return self._launch(
            "reducescatter",
            CollectiveOp.REDUCE_SCATTER,
            _nbytes(input_tensors[0]) if input_tensors else 0,
            unwrap,
            lambda: self._gloo.reduce_scatter(outs, ins, gloo_opts),
            output_tensors,
            opts,
            finish=finish,
        )

    def reduce_scatter_single(
        self, output: torch.Tensor, input: torch.Tensor, opts: Any = None
    ) -> HcclWork:
        """``reduce_scatter_tensor``: ``input`` reduced over the ranks, this rank's share."""
        opts = opts if opts is not None else ReduceScatterOptions()
        unwrap = self._unwrapper()
        out, inp = unwrap(output, output=True), unwrap(input)
        gloo_opts, finish = self._reduce_op(opts, ReduceScatterOptions, [out])

        def call() -> dist.Work:
            if out.is_contiguous() and inp.is_contiguous() and not out.is_meta:
                # as a list reduce-scatter over flat views: gloo's work then has a future
                rows = list(inp.view(self._world_size, -1))
                return self._gloo.reduce_scatter([out.view(-1)], [rows], gloo_opts)
            return self._gloo._reduce_scatter_base(out, inp, gloo_opts)

        return self._launch(
            "reducescatter",
            CollectiveOp.REDUCE_SCATTER,
            _nbytes([input]),
            unwrap,
            call,
            [output],
            opts,
            finish=finish,
        )

    _reduce_scatter_base = reduce_scatter_single

    def reduce(self, tensors: list[torch.Tensor], opts: Any = None) -> HcclWork:
        """Reduce to ``opts.rootRank``; costed as an all-reduce (reduce-scatter + gather)."""
        opts = opts if opts is not None else ReduceOptions()
        unwrap = self._unwrapper()
        views = unwrap.many(tensors)
        gloo_opts, finish = self._reduce_op(opts, ReduceOptions, views)
        if finish is not None and self._rank != opts.rootRank:
            finish = None  # only the root holds the result
        return self._launch(
            "reduce",
            CollectiveOp.ALL_REDUCE,
            _nbytes(tensors[:1]),
            unwrap,
            lambda: self._gloo.reduce(views, gloo_opts),
            tensors,
            opts,
            finish=finish,
        )

    def gather(
        self,
        output_tensors: list[list[torch.Tensor]],
        input_tensors: list[torch.Tensor],
        opts: Any = None,
    ) -> HcclWork:
        """Gather to ``opts.rootRank``; costed as an all-gather of the gathered bytes."""
        opts = opts if opts is not None else GatherOptions()
        unwrap = self._unwrapper()
        outs = unwrap.nested(output_tensors, output=True)
        ins = unwrap.many(input_tensors)
        return self._launch(
            "gather",
            CollectiveOp.ALL_GATHER,
            _nbytes(input_tensors[:1]) * self._world_size,
            unwrap,
            lambda: self._gloo.gather(outs, ins, opts),
            output_tensors,
            opts,
        )

    def scatter(
        self,
        output_tensors: list[torch.Tensor],
        input_tensors: list[list[torch.Tensor]],
        opts: Any = None,
    ) -> HcclWork:
        """Scatter from ``opts.rootRank``; costed as an all-gather (a scatter moves as much)."""
        opts = opts if opts is not None else ScatterOptions()
        unwrap = self._unwrapper()
        outs = unwrap.many(output_tensors, output=True)
        ins = unwrap.nested(input_tensors)
        return self._launch(
            "scatter",
            CollectiveOp.ALL_GATHER,
            _nbytes(output_tensors[:1]) * self._world_size,
            unwrap,
            lambda: self._gloo.scatter(outs, ins, opts),
            output_tensors,
            opts,
        )

    def barrier(self, opts: Any = None) -> HcclWork:
        """An HCCL task of no data on every rank; ``wait()`` blocks the host until it ends."""
        unwrap = self._unwrapper()
        gloo_opts = dist.BarrierOptions()
        if opts is not None:
            gloo_opts.timeout = opts.timeout
        return self._launch(
            "barrier",
            CollectiveOp.ALL_REDUCE,
            0,
            unwrap,
            lambda: self._gloo.barrier(gloo_opts),
            [],
            opts,
            barrier=True,
        )

    # ---- helpers --------------------------------------------------------------------------

    def _reduce_op(
        self, opts: Any, kind: type, views: Sequence[torch.Tensor]
    ) -> tuple[Any, Callable[[], None] | None]:
        """Options for gloo, and what to do after it (AVG is SUM then a division)."""
        if opts.reduceOp != _AVG:
            return opts, None
        gloo_opts = kind()
        for field in ("rootRank", "rootTensor"):
            if hasattr(opts, field):
                setattr(gloo_opts, field, getattr(opts, field))
        gloo_opts.reduceOp = dist.ReduceOp.SUM
        gloo_opts.timeout = opts.timeout
        return gloo_opts, _average(views, self._world_size)


def _allreduce_options(opts: Any) -> AllreduceOptions:
    if opts is None:
        return AllreduceOptions()
    if isinstance(opts, AllreduceOptions):
        return opts
    converted = AllreduceOptions()  # pg.allreduce(tensors, ReduceOp.MAX)
    converted.reduceOp = opts
    return converted


def _timeout_of(opts: Any, default: timedelta) -> timedelta:
    timeout = getattr(opts, "timeout", None)
    if isinstance(timeout, timedelta) and timeout.total_seconds() > 0:
        return timeout
    return default
