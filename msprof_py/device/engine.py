"""The virtual-time engine: a host clock, streams, events and engines (core pools, DMA, links).

Every task is scheduled when the host submits it ("eager" list scheduling): its start is the
latest of when the host finished launching it, when the previous task on its stream ended, any
event it waits on, and when the units it needs are free. Those units are real resources with a
timeline each (:class:`~msprof_py.device.resources.ResourcePool`), so tasks on different streams
run concurrently only while cores, DMA engines and links last. All times are integer ns.

Host semantics follow ACL and torch_npu: launching a kernel costs the host stage-1 time, and with
the task queue on, stage 2 (aclnn call, tiling, launch) runs on a second host thread in a
pipeline; runtime API calls cost ``api_call_ns``; synchronize calls and pageable copies block the
host until the device work they wait for has finished; a full stream (``stream_depth`` tasks in
flight) blocks the host until its oldest task ends, and so does a full task queue
(``task_queue_depth`` launches waiting for stage 2) until the oldest is launched.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from msprof_py.device import native
from msprof_py.device.collectives import CollectiveCost
from msprof_py.device.costmodel import KernelCost, copy_ns, memset_ns
from msprof_py.device.errors import DeviceError, EventNotReadyError
from msprof_py.device.records import (
    CopyKind,
    HostKind,
    HostRecord,
    RecordBus,
    TaskKind,
    TaskRecord,
    TaskType,
)
from msprof_py.device.resources import ResourcePool
from msprof_py.device.schedule import PythonCore
from msprof_py.device.spec import DeviceSpec

#: the tensor fields of a task record that describes no tensors
_NO_TENSORS: tuple[tuple, tuple, tuple, tuple, tuple, tuple] = ((), (), (), (), (), ())
_COPY_POOL = {CopyKind.H2D: "h2d", CopyKind.D2H: "d2h", CopyKind.D2D: "sdma"}
_COPY_API = {
    CopyKind.H2D: "MEMCPY_H2D",
    CopyKind.D2H: "MEMCPY_D2H",
    CopyKind.D2D: "MEMCPY_D2D",
}


@dataclass(frozen=True, slots=True)
class GraphTask:
    """One kernel of a graph launch (:meth:`Engine.submit_graph`).

    ``stream`` indexes the streams handed to :meth:`Engine.submit_graph` (0: the launch
    stream); ``waits`` are indices of earlier tasks of the same launch that must end before
    this one starts (the graph's cross-stream events).
    """

    name: str
    op_type: str
    cost: KernelCost
    stream: int = 0
    waits: tuple[int, ...] = ()
    input_shapes: tuple[tuple[int, ...], ...] = ()
    input_dtypes: tuple[str, ...] = ()
    input_formats: tuple[str, ...] = ()
    output_shapes: tuple[tuple[int, ...], ...] = ()
    output_dtypes: tuple[str, ...] = ()
    output_formats: tuple[str, ...] = ()


@dataclass(eq=False, slots=True)
class Event:
    """A marker recorded on a stream; other streams and the host can wait for it."""

    event_id: int
    timing: bool = True
    #: device time at which the event completes; None until recorded
    recorded_ns: int | None = None
    stream_id: int = -1

    def __repr__(self) -> str:
        return f"Event(id={self.event_id}, recorded_ns={self.recorded_ns})"


class _EngineMethods:
    """Everything the engine does beyond its scheduling core (streams, events, copies,
    collectives, graphs, records); :class:`Engine` puts it on a core."""

    #: the stream and pool types of the core, and its host clock's (None: ``getattr``)
    stream_type: type
    pool_type: type
    clock_type: type | None

    def __init__(self, spec: DeviceSpec, bus: RecordBus | None = None) -> None:
        self.spec = spec
        self.bus = bus if bus is not None else RecordBus()
        self._next_stream_id = 0
        self._next_event_id = 0
        self.streams: dict[int, Stream] = {}
        self.pools: dict[str, ResourcePool] = self._make_pools(spec)
        self._demands: dict[tuple[TaskType, int], tuple[tuple[ResourcePool, int], ...]] = {}
        dispatch = spec.dispatch
        self._core_setup(
            dispatch.stage1_ns,
            dispatch.stage2_ns,
            spec.limits.stream_depth,
            dispatch.task_queue,
            dispatch.task_queue_depth,
            dispatch.sync_ns,
            self.streams,
            self.pools,
            self._demands,
            DeviceError,
        )
        self.default_stream = self.create_stream()

    # ---- resources ------------------------------------------------------------------------

    @classmethod
    def _make_pools(cls, spec: DeviceSpec) -> dict[str, ResourcePool]:
        pools = {
            "aicpu": spec.aicpu.cores,
            "h2d": 1,
            "d2h": 1,
            "sdma": 1,
            "hccl": 1,
        }
        if spec.shares_core_pool:
            pools["aicore"] = spec.cube.cores
        else:
            pools["aic"] = spec.cube.cores
            pools["aiv"] = spec.vector.cores
        return {name: cls.pool_type(name, cap) for name, cap in pools.items()}

    def _demand(self, task_type: TaskType, block_dim: int) -> tuple[tuple[ResourcePool, int], ...]:
        key = (task_type, block_dim)
        found = self._demands.get(key)
        if found is not None:
            return found
        p = self.pools
        coupled = self.spec.shares_core_pool
        if task_type in (TaskType.AI_CORE, TaskType.AI_VECTOR_CORE, TaskType.MIX_AIC) and coupled:
            demand = ((p["aicore"], block_dim),)
        elif task_type is TaskType.AI_CORE:
            demand = ((p["aic"], block_dim),)
        elif task_type is TaskType.AI_VECTOR_CORE:
            demand = ((p["aiv"], block_dim),)
        elif task_type is TaskType.MIX_AIC:
            demand = ((p["aic"], block_dim), (p["aiv"], 2 * block_dim))
        elif task_type is TaskType.AI_CPU:
            demand = ((p["aicpu"], block_dim),)
        elif task_type is TaskType.HCCL:
            demand = ((p["hccl"], 1),)
        else:
            demand = ()
        self._demands[key] = demand
        return demand

    # ---- streams and events ---------------------------------------------------------------

    def create_stream(self, priority: int = 0) -> Stream:
        """Create a stream (``aclrtCreateStream``)."""
        live = sum(not s.destroyed for s in self.streams.values())
        if live >= self.spec.limits.max_streams:
            raise DeviceError(f"cannot create more than {self.spec.limits.max_streams} streams")
        stream = self.stream_type(self._next_stream_id, priority)
        self._next_stream_id += 1
        self.streams[stream.stream_id] = stream
        return stream

    def destroy_stream(self, stream: Stream) -> None:
        """Destroy a stream once its work is done (``aclrtDestroyStream`` waits for it)."""
        self._check(stream)
        if stream is self.default_stream:
            raise DeviceError("the default stream cannot be destroyed")
        self.synchronize_stream(stream)
        stream.destroyed = True

    def create_event(self, *, timing: bool = True) -> Event:
        """Create an event (``aclrtCreateEvent``); ``timing=False`` disables elapsed time."""
        event = Event(self._next_event_id, timing)
        self._next_event_id += 1
        return event

    # ---- host clock -----------------------------------------------------------------------

    def host_clock(self) -> Callable[[], int]:
        """A callable that reads :attr:`host_ns` now, called per record without a Python
        frame: on the compiled core its ``HostClock`` (compiled code reads the time through it
        without a call), else ``getattr`` bound to this engine."""
        if self.clock_type is not None:
            return self.clock_type(self)
        return functools.partial(getattr, self, "host_ns")

    def advance_host(self, ns: int, name: str = "") -> None:
        """Move the host clock forward by ``ns`` (application time between runtime calls)."""
        if ns < 0:
            raise ValueError("host time cannot go backwards")
        start = self.host_ns
        self.host_ns += ns
        if name and self.bus.active and ns:
            self.bus.emit(HostRecord(HostKind.PYTHON, name, start, self.host_ns))

    # ---- task submission ------------------------------------------------------------------

    def _emit_launch(self, name: str, host_start: int, stream: Stream, task: TaskRecord) -> None:
        self.bus.emit(
            HostRecord(
                HostKind.LAUNCH, name, host_start, self.host_ns, stream.stream_id, task.task_id
            )
        )
        self.bus.emit(task)

    def submit_kernel(
        self,
        stream: Stream,
        cost: KernelCost,
        *,
        name: str,
        op_type: str,
        input_shapes: tuple[tuple[int, ...], ...] = (),
        input_dtypes: tuple[str, ...] = (),
        input_formats: tuple[str, ...] = (),
        output_shapes: tuple[tuple[int, ...], ...] = (),
        output_dtypes: tuple[str, ...] = (),
        output_formats: tuple[str, ...] = (),
        attrs: dict[str, object] | None = None,
        not_before: int = 0,
    ) -> TaskRecord:
        """Launch a costed kernel on ``stream``; returns its scheduled task."""
        dispatch = self.spec.dispatch
        host_start, launch = self._launch(stream, dispatch.stage1_ns, dispatch.stage2_ns, name)
        task = self._place_kernel(
            stream,
            cost,
            launch,
            not_before,
            name,
            op_type,
            (
                input_shapes,
                input_dtypes,
                input_formats,
                output_shapes,
                output_dtypes,
                output_formats,
            ),
            attrs,
        )
        if self.bus.active:
            self._emit_launch(name, host_start, stream, task)
        return task

    def _place_kernel(
        self,
        stream: Stream,
        cost: KernelCost,
        launch: int,
        not_before: int,
        name: str,
        op_type: str,
        tensors: tuple[tuple, tuple, tuple, tuple, tuple, tuple],
        attrs: dict[str, object] | None,
    ) -> TaskRecord:
        """Schedule a launched kernel on ``stream`` and build its task record (``tensors``:
        input shapes, dtypes, formats, then output shapes, dtypes, formats)."""
        demand = self._demand(cost.task_type, cost.block_dim)
        start, end, wait = self._place(stream, launch, cost.duration_ns, demand, not_before)
        numbers = (launch, start, end, wait, self._new_task_id())
        return self._kernel_record(stream, cost, name, op_type, tensors, attrs, *numbers)

    @staticmethod
    def _kernel_record(
        stream: Stream,
        cost: KernelCost,
        name: str,
        op_type: str,
        tensors: tuple[tuple, tuple, tuple, tuple, tuple, tuple],
        attrs: dict[str, object] | None,
        launch: int,
        start: int,
        end: int,
        wait: int,
        task_id: int,
    ) -> TaskRecord:
        return TaskRecord(
            task_id,
            stream.stream_id,
            TaskKind.KERNEL,
            cost.task_type,
            name,
            op_type,
            cost.block_dim,
            launch,
            start,
            end,
            wait,
            cost.flops,
            cost.bytes,
            *tensors,
            attrs,
            round(cost.cube_ns),
            round(cost.vector_ns),
            round(cost.memory_ns),
        )

    def _emit_kernel(
        self,
        stream: Stream,
        cost: KernelCost,
        name: str,
        op_type: str,
        tensors: tuple[tuple, tuple, tuple, tuple, tuple, tuple] | None,
        attrs: dict[str, object] | None,
        numbers: tuple[int, int, int, int, int, int],
    ) -> None:
        """The records of a kernel the core's ``launch_kernel`` placed while the bus has
        subscribers (``numbers``: host start, launch, start, end, wait, task id)."""
        host_start, launch, start, end, wait, task_id = numbers
        bus = self.bus
        bus.emit(
            HostRecord(HostKind.LAUNCH, name, host_start, self.host_ns, stream.stream_id, task_id)
        )
        tensors = tensors or _NO_TENSORS
        bus.emit(
            self._kernel_record(
                stream, cost, name, op_type, tensors, attrs, launch, start, end, wait, task_id
            )
        )

    def _on_block(self, name: str, start: int, stream_id: int) -> None:
        """The host blocked from ``start`` to now (the core moved the clock): a SYNC record."""
        if self.bus.active:
            self.bus.emit(HostRecord(HostKind.SYNC, name, start, self.host_ns, stream_id))

    def submit_graph(
        self, streams: Sequence[Stream], tasks: Sequence[GraphTask], *, name: str = "ModelExecute"
    ) -> list[TaskRecord]:
        """Launch a compiled graph: one host launch, then every task on its stream.

        The host pays one launch (stage 1 and 2, as for a kernel) on ``streams[0]`` and returns;
        the tasks were sunk to the device with the graph, so each is ready at that launch time
        and starts after its stream's previous task and the tasks it ``waits`` for. When the
        graph spans several streams, ``streams[0]`` ends after all of them (the model's closing
        event), so work issued after the graph sees its results. One LAUNCH host record names
        the launch (linked to the first task); each task gets its task record.
        """
        if not streams:
            raise ValueError("a graph launch needs at least one stream")
        for stream in streams:
            self._check(stream)
        dispatch = self.spec.dispatch
        host_start, launch = self._launch(streams[0], dispatch.stage1_ns, dispatch.stage2_ns, name)
        records: list[TaskRecord] = []
        for task in tasks:
            if not 0 <= task.stream < len(streams):
                raise ValueError(f"graph task {task.name!r} names stream {task.stream}")
            stream = streams[task.stream]
            cost = task.cost
            not_before = 0
            for w in task.waits:
                if not 0 <= w < len(records):
                    raise ValueError(f"graph task {task.name!r} waits for a later task {w}")
                not_before = max(not_before, records[w].end_ns)
            tensors = (
                task.input_shapes,
                task.input_dtypes,
                task.input_formats,
                task.output_shapes,
                task.output_dtypes,
                task.output_formats,
            )
            records.append(
                self._place_kernel(
                    stream, cost, launch, not_before, task.name, task.op_type, tensors, None
                )
            )
        main = streams[0]
        tail = max(s.tail_ns for s in streams)
        if tail > main.tail_ns:
            main.tail_ns = tail
            main.has_tasks = True
        if self.bus.active:
            first = records[0].task_id if records else -1
            self.bus.emit(
                HostRecord(HostKind.LAUNCH, name, host_start, self.host_ns, main.stream_id, first)
            )
            for record in records:
                self.bus.emit(record)
        return records

    def host_span(self, ns: int, name: str) -> None:
        """The host spends ``ns`` in a runtime call of its own (graph compilation ...): an API
        host record."""
        if ns < 0:
            raise ValueError("host time cannot go backwards")
        start = self.host_ns
        self.host_ns += ns
        if self.bus.active:
            self.bus.emit(HostRecord(HostKind.API, name, start, self.host_ns))

    def _submit_simple(
        self,
        stream: Stream,
        kind: TaskKind,
        task_type: TaskType,
        name: str,
        op_type: str,
        duration: int,
        demand: Sequence[tuple[ResourcePool, int]],
        *,
        nbytes: int = 0,
        attrs: dict[str, object] | None = None,
        not_before: int = 0,
        peers_ready: int = 0,
    ) -> TaskRecord:
        host_start, launch = self._launch(stream, self.spec.dispatch.api_call_ns, 0, name)
        tail, had_tasks = stream.tail_ns, stream.has_tasks
        start, end, wait = self._place(
            stream, launch, duration, demand, max(not_before, peers_ready)
        )
        if peers_ready:  # a collective begins when this rank is ready, then waits for its peers
            begin = max(launch, tail, not_before)
            if begin < start:
                attrs = {**(attrs or {}), "notify_wait_ns": start - begin}
                wait = begin - tail if had_tasks else 0
                start = begin
        task = TaskRecord(
            self._new_task_id(),
            stream.stream_id,
            kind,
            task_type,
            name,
            op_type,
            1 if demand else 0,
            launch,
            start,
            end,
            wait,
            bytes=nbytes,
            attrs=attrs,
        )
        if self.bus.active:
            self._emit_launch(name, host_start, stream, task)
        return task

    def add_pool(self, name: str, capacity: int) -> ResourcePool:
        """The engine pool ``name`` (DVPP channels ...), created with ``capacity`` units on
        first use; a later call returns the existing pool."""
        pool = self.pools.get(name)
        if pool is None:
            pool = self.pools[name] = self.pool_type(name, capacity)
        return pool

    def submit_unit_task(
        self,
        stream: Stream,
        pool: str,
        units: int,
        duration_ns: int,
        *,
        kind: TaskKind,
        task_type: TaskType,
        name: str,
        op_type: str,
        nbytes: int = 0,
        attrs: dict[str, object] | None = None,
    ) -> TaskRecord:
        """Run a task of ``duration_ns`` that holds ``units`` units of pool ``pool`` (made with
        :meth:`add_pool`): in order on ``stream``, waiting for free units like any task; the
        host pays one runtime API call to submit it."""
        found = self.pools.get(pool)
        if found is None:
            raise DeviceError(f"the device has no engine pool {pool!r}")
        if duration_ns < 0:
            raise ValueError("a task cannot take negative time")
        return self._submit_simple(
            stream,
            kind,
            task_type,
            name,
            op_type,
            duration_ns,
            ((found, units),),
            nbytes=nbytes,
            attrs=attrs,
        )

    def submit_memcpy(
        self,
        stream: Stream,
        kind: CopyKind,
        nbytes: int,
        *,
        pinned: bool = True,
        blocking: bool = False,
        name: str | None = None,
    ) -> TaskRecord | None:
        """Copy ``nbytes`` in direction ``kind`` on ``stream``.

        A copy from or to pageable host memory (``pinned=False``) blocks the host until it has
        finished, as does ``blocking=True`` (synchronous ``aclrtMemcpy``); otherwise the host
        returns at once. Host-to-host copies run on the host alone and return None.
        """
        if kind is CopyKind.H2H:
            self.advance_host(copy_ns(self.spec, kind, nbytes), name or "memcpy host-to-host")
            return None
        label = name or ("aclrtMemcpyAsync" if not blocking else "aclrtMemcpy")
        duration = copy_ns(self.spec, kind, nbytes, pinned=pinned)
        demand = ((self.pools[_COPY_POOL[kind]], 1),)
        attrs: dict[str, object] = {"copy_kind": kind.value}
        if kind is not CopyKind.D2D:
            attrs["pinned"] = pinned
        task = self._submit_simple(
            stream,
            TaskKind.MEMCPY,
            TaskType.DMA,
            label,
            _COPY_API[kind],
            duration,
            demand,
            nbytes=nbytes,
            attrs=attrs,
        )
        host_blocks = kind is not CopyKind.D2D and not pinned
        if blocking or host_blocks:
            self._block_until(task.end_ns, f"{label} (wait)", stream.stream_id)
        return task

    def submit_memset(
        self, stream: Stream, nbytes: int, *, name: str = "aclrtMemsetAsync"
    ) -> TaskRecord:
        """Fill ``nbytes`` of device memory on ``stream`` (an SDMA task)."""
        demand = ((self.pools["sdma"], 1),)
        duration = memset_ns(self.spec, nbytes)
        return self._submit_simple(
            stream, TaskKind.MEMSET, TaskType.DMA, name, "MEMSET", duration, demand, nbytes=nbytes
        )

    def submit_collective(
        self,
        stream: Stream,
        cost: CollectiveCost,
        *,
        name: str | None = None,
        not_before: int = 0,
        peers_ready: int = 0,
    ) -> TaskRecord:
        """Run a costed HCCL collective on ``stream``; ``not_before`` holds it until this rank
        is ready.

        ``peers_ready`` is the slowest rank's arrival, when the caller knows it: the transfer
        starts no earlier. As on a real NPU the task begins when this rank is ready and its
        first phase waits for the peers (HCCL's notify wait, ``attrs["notify_wait_ns"]``), so a
        fast rank's wait for a straggler is communication time on its timeline."""
        op = cost.op.value if hasattr(cost.op, "value") else str(cost.op)
        label = name or f"hcom_{op}_"
        attrs: dict[str, object] = {
            "collective": op,
            "algorithm": cost.algorithm,
            "world_size": cost.world_size,
        }
        return self._submit_simple(
            stream,
            TaskKind.COLLECTIVE,
            TaskType.HCCL,
            label,
            op,
            cost.duration_ns,
            self._demand(TaskType.HCCL, 1),
            nbytes=cost.n_bytes,
            attrs=attrs,
            not_before=not_before,
            peers_ready=peers_ready,
        )

    def record_event(self, event: Event, stream: Stream) -> TaskRecord:
        """Record ``event`` on ``stream``: it completes when the stream's prior work has ended."""
        task = self._submit_simple(
            stream,
            TaskKind.EVENT_RECORD,
            TaskType.EVENT,
            "aclrtRecordEvent",
            "EVENT_RECORD",
            0,
            (),
            attrs={"event_id": event.event_id},
        )
        event.recorded_ns = task.end_ns
        event.stream_id = stream.stream_id
        return task

    def wait_event(self, stream: Stream, event: Event) -> TaskRecord:
        """Make ``stream`` wait for ``event``'s most recent record (a no-op if never recorded)."""
        dispatch = self.spec.dispatch
        host_start, launch = self._launch(stream, dispatch.api_call_ns, 0, "aclrtStreamWaitEvent")
        start = max(launch, stream.tail_ns)
        target = event.recorded_ns if event.recorded_ns is not None else start
        start, end, wait = self._place(stream, launch, max(0, target - start), (), 0)
        task = TaskRecord(
            self._new_task_id(),
            stream.stream_id,
            TaskKind.EVENT_WAIT,
            TaskType.EVENT,
            "aclrtStreamWaitEvent",
            "EVENT_WAIT",
            0,
            launch,
            start,
            end,
            wait,
            attrs={"event_id": event.event_id},
        )
        if self.bus.active:
            self._emit_launch(task.name, host_start, stream, task)
        return task

    # ---- synchronisation ------------------------------------------------------------------

    def synchronize_stream(self, stream: Stream) -> None:
        """Block the host until every task on ``stream`` has finished."""
        self._check(stream)
        self._block_until(stream.tail_ns, "aclrtSynchronizeStream", stream.stream_id)

    def synchronize_device(self) -> None:
        """Block the host until every task on every stream has finished."""
        tail = max((s.tail_ns for s in self.streams.values()), default=0)
        self._block_until(tail, "aclrtSynchronizeDevice")

    def synchronize_event(self, event: Event) -> None:
        """Block the host until ``event`` completes (returns at once if never recorded)."""
        target = event.recorded_ns if event.recorded_ns is not None else self.host_ns
        self._block_until(target, "aclrtSynchronizeEvent", event.stream_id)

    def query_event(self, event: Event) -> bool:
        """True when ``event`` has completed by the host's current time (or was never recorded)."""
        return event.recorded_ns is None or event.recorded_ns <= self.host_ns

    def query_stream(self, stream: Stream) -> bool:
        """True when all work on ``stream`` has finished by the host's current time."""
        self._check(stream)
        return stream.tail_ns <= self.host_ns

    def event_elapsed_ms(self, start: Event, end: Event) -> float:
        """Simulated milliseconds between two completed events (``aclrtEventElapsedTime``)."""
        for event in (start, end):
            if not event.timing:
                raise DeviceError(f"event {event.event_id} was created without timing")
            if event.recorded_ns is None:
                raise DeviceError(f"event {event.event_id} has not been recorded")
            if event.recorded_ns > self.host_ns:
                raise EventNotReadyError(
                    f"event {event.event_id} has not completed yet; synchronize it first"
                )
        assert start.recorded_ns is not None and end.recorded_ns is not None
        return (end.recorded_ns - start.recorded_ns) / 1e6


def _compiled_core() -> type | None:
    """The compiled core (``device/native``) as a base class, or None where it is not built."""
    module = native.load()
    if module is None:
        return None
    attrs = {
        "stream_type": module.Stream,
        "pool_type": module.Pool,
        "clock_type": module.HostClock,
        "__slots__": (),
    }
    return type("CompiledCore", (module.EngineCore,), attrs)


class PythonEngine(_EngineMethods, PythonCore):
    """The engine on the pure-Python core (the reference the compiled core is tested against)."""


class Engine(_EngineMethods, _compiled_core() or PythonCore):  # type: ignore[misc]
    """Schedules tasks of one simulated device in deterministic virtual time (on the compiled
    core when it is built, else on the Python one: identical timelines)."""


#: the stream type of :class:`Engine`
Stream = Engine.stream_type
