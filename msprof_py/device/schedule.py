"""The engine's scheduling core in Python: the host clock, the task queue, task ids, and the
placing of tasks on streams and resource pools.

:class:`~msprof_py.device.engine.Engine` subclasses a core and adds everything else (copies,
events, graphs, records). This is the reference core; ``device/native/engine_core.c`` is the
same state and arithmetic compiled, used when it is built (:mod:`msprof_py.device.native`). A
property test runs random programs on both and compares every record and clock.

A core calls back into its engine for three things: ``_on_block(name, start, stream_id)``
after the host blocked (the engine emits the SYNC host record), ``_demand(task_type,
block_dim)`` on a demand-cache miss, and ``_emit_kernel(stream, cost, name, op_type, tensors,
attrs, numbers)`` when :meth:`PythonCore.launch_kernel` placed a kernel while the record bus
has subscribers (``numbers``: host start, launch, start, end, wait, task id).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from msprof_py.device.resources import ResourcePool

#: pool timelines are pruned once per this many placed tasks
PRUNE_EVERY = 256


@dataclass(eq=False, slots=True)
class PythonStream:
    """An in-order queue of device tasks."""

    stream_id: int
    priority: int = 0
    #: when the last task submitted to this stream ends
    tail_ns: int = 0
    has_tasks: bool = False
    destroyed: bool = False
    #: end times of tasks that may still be running (bounded by the stream depth)
    inflight: deque[int] = field(default_factory=deque)

    def __repr__(self) -> str:
        return f"Stream(id={self.stream_id})"


Demand = Sequence[tuple[ResourcePool, int]]


class PythonCore:
    """The scheduling state of one engine, in Python (see the module docstring)."""

    #: the stream and pool types this core schedules
    stream_type: type = PythonStream
    pool_type: type = ResourcePool
    #: no host clock type of its own (Engine.host_clock binds ``getattr``)
    clock_type: type | None = None

    host_ns: int
    tasks_submitted: int
    streams: dict[int, Any]
    pools: dict[str, Any]
    bus: Any

    def _core_setup(
        self,
        stage1_ns: int,
        stage2_ns: int,
        stream_depth: int,
        task_queue: bool,
        task_queue_depth: int,
        sync_ns: int,
        streams: dict[int, Any],
        pools: dict[str, Any],
        demands: dict[tuple[Any, int], tuple],
        device_error: type[Exception],
    ) -> None:
        """Configure the core (dispatch costs, queue depths, the engine's streams, pools and
        demand cache, the error for a dead stream) and reset its clocks."""
        self._stage1_ns, self._stage2_ns = stage1_ns, stage2_ns
        self._stream_depth = stream_depth
        self._task_queue, self._task_queue_depth = task_queue, task_queue_depth
        self._sync_ns = sync_ns
        self._core_streams, self._core_pools = streams, pools
        self._core_demands = demands
        self._device_error = device_error
        #: the host thread's clock (ns since the device's time origin)
        self.host_ns = 0
        self._stage2_free_ns = 0
        #: launch times of calls still waiting in the task queue (bounded by its depth)
        self._queued_launches: deque[int] = deque()
        self._next_task_id = 0
        self.tasks_submitted = 0
        self._since_prune = 0

    def _check(self, stream: PythonStream) -> None:
        if stream.destroyed or self._core_streams.get(stream.stream_id) is not stream:
            raise self._device_error(f"stream {stream.stream_id} does not exist on this device")

    def _block_until(self, t: int, name: str, stream_id: int = -1) -> None:
        """Block the host until device time ``t``, then pay the cost of returning."""
        start = self.host_ns
        self.host_ns = max(start, t) + self._sync_ns
        self._on_block(name, start, stream_id)

    def _on_block(self, name: str, start: int, stream_id: int) -> None:  # the engine's
        raise NotImplementedError

    def _demand(self, task_type: Any, block_dim: int) -> tuple:  # the engine's
        raise NotImplementedError

    def _emit_kernel(self, *args: Any) -> None:  # the engine's
        raise NotImplementedError

    def _launch(self, stream: PythonStream, stage1: int, stage2: int, name: str) -> tuple[int, int]:
        """Pay the host cost of submitting to ``stream``; return (host start, launch time)."""
        self._check(stream)
        inflight = stream.inflight
        while inflight and inflight[0] <= self.host_ns:
            inflight.popleft()
        if inflight and len(inflight) >= self._stream_depth:
            self._block_until(inflight[0], "stream queue full", stream.stream_id)
            while inflight and inflight[0] <= self.host_ns:
                inflight.popleft()
        if self._task_queue:
            queue = self._queued_launches
            while queue and queue[0] <= self.host_ns:
                queue.popleft()
            if queue and len(queue) >= self._task_queue_depth:
                self._block_until(queue[0], "task queue full", stream.stream_id)
                while queue and queue[0] <= self.host_ns:
                    queue.popleft()
            host_start = self.host_ns
            self.host_ns = host_start + stage1
            launch = max(self.host_ns, self._stage2_free_ns) + stage2
            self._stage2_free_ns = launch
            queue.append(launch)
        else:
            host_start = self.host_ns
            self.host_ns = host_start + stage1 + stage2
            launch = self._stage2_free_ns = self.host_ns
        return host_start, launch

    def _earliest(self, ready: int, duration: int, demand: Demand) -> int:
        """First start >= ``ready`` at which every pool of ``demand`` has its units free."""
        start = ready
        while True:
            moved = False
            for pool, units in demand:
                t = pool.earliest(start, units, duration)
                if t != start:
                    start, moved = t, True
            if not moved:
                return start

    def _place(
        self, stream: PythonStream, launch: int, duration: int, demand: Demand, not_before: int
    ) -> tuple[int, int, int]:
        """Find the start of a task and book its resources; return (start, end, wait)."""
        ready = max(launch, stream.tail_ns, not_before)
        start = self._earliest(ready, duration, demand) if demand else ready
        end = start + duration
        for pool, units in demand:
            pool.reserve(start, end, units)
        wait = start - stream.tail_ns if stream.has_tasks else 0
        stream.tail_ns = end
        stream.has_tasks = True
        stream.inflight.append(end)
        self._since_prune += 1
        if self._since_prune >= PRUNE_EVERY:
            self._prune()
        return start, end, wait

    def _prune(self) -> None:
        """Forget pool timelines before the horizon."""
        self._since_prune = 0
        # every future task launches at or after both the host clock and the queue frontier
        horizon = max(self.host_ns, self._stage2_free_ns)
        for pool in self._core_pools.values():
            pool.prune(horizon)

    def _new_task_id(self) -> int:
        task_id = self._next_task_id
        self._next_task_id += 1
        self.tasks_submitted += 1
        return task_id

    def launch_kernel(
        self,
        stream: PythonStream,
        cost: Any,
        name: str,
        op_type: str,
        tensors: tuple | None = None,
        attrs: dict[str, object] | None = None,
    ) -> None:
        """Launch a costed kernel on ``stream`` without returning its task (the adapter's
        per-op launch): the same timeline and task ids as ``Engine.submit_kernel``, and records
        built only while the bus has subscribers. ``tensors``: input shapes, dtypes and
        formats, then output shapes, dtypes and formats, as the task record's fields. The
        compiled core writes the rows into the bus's ``direct`` sink instead of emitting
        records when it has one; it keeps the texts of ``tensors`` and ``attrs`` by identity,
        so neither may be changed after the call (the adapter passes cached, shared ones)."""
        key = (cost.task_type, cost.block_dim)
        demand = self._core_demands.get(key)
        if demand is None:
            demand = self._demand(cost.task_type, cost.block_dim)
        host_start, launch = self._launch(stream, self._stage1_ns, self._stage2_ns, name)
        start, end, wait = self._place(stream, launch, cost.duration_ns, demand, 0)
        task_id = self._new_task_id()
        if self.bus.active:
            numbers = (host_start, launch, start, end, wait, task_id)
            self._emit_kernel(stream, cost, name, op_type, tensors, attrs, numbers)
