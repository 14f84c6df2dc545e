"""The recorder: turns device records and host ops into rows of the raw profile.

It subscribes to the simulated device's record bus (tasks, host launches and syncs, memory
events, step marks) and observes the adapter's host ops. Rows go to a
:class:`~msprof_py.profile.writer.RawWriter`, which flushes them to disk in bounded chunks.
Only steps inside the iteration window (``warmup`` steps skipped, then ``iteration`` steps) are
kept; outside it nothing is written.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from msprof_py.adapter import backward_thread
from msprof_py.adapter.steps import STEP_PREFIX
from msprof_py.collectors.module_paths import ModuleStack
from msprof_py.collectors.stacks import StackRecorder
from msprof_py.collectors.stepsource import parse_steps_from, split_source
from msprof_py.device import (
    GraphRecord,
    HostKind,
    HostRecord,
    MemoryAction,
    MemoryRecord,
    TaskKind,
    TaskRecord,
    TaskType,
)
from msprof_py.device import native as device_native
from msprof_py.device.records import Record
from msprof_py.profile.meta import THREAD_NAME_LIMIT
from msprof_py.profile.schema import NO_ID
from msprof_py.profile.writer import CLOCK_EVERY, RawWriter

_size = torch._C.TensorBase.size
_TENSOR = torch.Tensor
_current_node = torch._C._current_autograd_node
_peek_sequence = torch.autograd._get_sequence_nr


def _sequence_number() -> int:
    """The autograd sequence number pairing a forward op with its backward: in backward, the
    node being run's number; in forward (grad mode), the number its grad_fn will get."""
    node = _current_node()
    if node is not None:
        number = int(node._sequence_nr())
    elif torch.is_grad_enabled():
        number = int(_peek_sequence())
    else:
        return NO_ID
    return number if 0 <= number < 2**63 else NO_ID  # the engine's "none" is uint64 max


#: step sources a script states explicitly; once one is seen, optimizer hooks no longer count
EXPLICIT_STEP_SOURCES = ("torch_npu.profiler", "msprof_py.step")


# A training loop repeats the same shapes: their text forms are cached (bounded).
_TEXT_CACHE_LIMIT = 65_536
_shape_text: dict[tuple, str] = {}
_join_text: dict[tuple, str] = {}
_arg_text: dict[tuple, tuple[str, str]] = {}


def _remember(cache: dict, key: tuple, value: object) -> None:
    if len(cache) >= _TEXT_CACHE_LIMIT:
        cache.clear()
    cache[key] = value


def _shapes(shapes: tuple[tuple[int, ...], ...]) -> str:
    text = _shape_text.get(shapes)
    if text is None:
        text = ";".join(",".join(str(d) for d in shape) for shape in shapes)
        _remember(_shape_text, shapes, text)
    return text


def _joined(names: tuple[str, ...]) -> str:
    text = _join_text.get(names)
    if text is None:
        text = ";".join(names)
        _remember(_join_text, names, text)
    return text


def _arg_shapes(args: tuple) -> tuple[str, str]:
    # not a.shape: an UninitializedParameter refuses it
    key = tuple([(_size(a), a.dtype) for a in args if isinstance(a, _TENSOR)])
    found = _arg_text.get(key)
    if found is None:
        found = (
            ";".join(",".join(str(d) for d in shape) for shape, _ in key),
            ";".join(str(dtype).removeprefix("torch.") for _, dtype in key),
        )
        _remember(_arg_text, key, found)
    return found


#: the attribute columns of a task without attributes
_NO_ATTRS = ("", False, "", "", 0, 0, "")

# an enum's ``.value`` is a slow descriptor: the column texts, looked up by member
_TASK_KIND_TEXT = {kind: kind.value for kind in TaskKind}
_TASK_TYPE_TEXT = {task_type: task_type.value for task_type in TaskType}
_HOST_KIND_TEXT = {kind: kind.value for kind in HostKind}
_ACTION_TEXT = {action: action.value for action in MemoryAction}

#: id of an attrs dict most kernels share (the compile cache's) -> (the dict, its columns);
#: the dict is kept, so its id stays its own
_attr_rows: dict[int, tuple[dict, tuple]] = {}
_SHARED_ATTR_KEYS = frozenset({"op_state"})


def _attr_fields(attrs: dict[str, object]) -> tuple[str, bool, str, str, int, int, str]:
    """The attribute columns of a task row: copy kind, pinned, collective, algorithm, world
    size, notify wait, op state."""
    return (
        str(attrs.get("copy_kind", "")),
        bool(attrs.get("pinned", False)),
        str(attrs.get("collective", "")),
        str(attrs.get("algorithm", "")),
        int(attrs.get("world_size", 0)),
        int(attrs.get("notify_wait_ns", 0)),
        str(attrs.get("op_state", "")),
    )


def _shared_attr_fields(attrs: dict[str, object]) -> tuple:
    """:func:`_attr_fields` of an attrs dict, remembered by identity for the few dicts the
    adapter hands to every kernel (the compile cache's op state); copies, events and
    collectives make a dict per task, computed each time."""
    found = _attr_rows.get(id(attrs))
    if found is not None and found[0] is attrs:
        return found[1]
    fields = _attr_fields(attrs)
    if len(_attr_rows) < 64 and attrs.keys() <= _SHARED_ATTR_KEYS:
        _attr_rows[id(attrs)] = (attrs, fields)
    return fields


#: the task record fields of a kernel without tensors
_NO_TENSORS = ((), (), (), (), (), ())


def _tensor_texts(tensors: tuple | None) -> tuple[str, str, str, str, str, str]:
    """The shape, dtype and format columns of a kernel's task row, from the ``tensors`` fields
    the engine's ``launch_kernel`` got (input shapes, dtypes, formats, then the outputs')."""
    in_shapes, in_dtypes, in_formats, out_shapes, out_dtypes, out_formats = tensors or _NO_TENSORS
    return (
        _shapes(in_shapes),
        _joined(in_dtypes),
        _joined(in_formats),
        _shapes(out_shapes),
        _joined(out_dtypes),
        _joined(out_formats),
    )


def _attr_columns(attrs: dict[str, object] | None) -> tuple:
    """The attribute columns of a task row (:data:`_NO_ATTRS` without attributes)."""
    return _shared_attr_fields(attrs) if attrs else _NO_ATTRS


class _RowState:
    """What the rows being written read now: the step, the host op open now (its event id
    is the ``parent`` of what it launches), the next event id, and whether host-op, task,
    launch and memory rows are recorded now; and the open host op's row, written at its end. The
    compiled ``RowSink`` has the same fields and methods (the cores write their rows from
    them); this is its stand-in where it is not built or not used."""

    __slots__ = (
        "_op",
        "_writer",
        "api_on",
        "memory_on",
        "next_event",
        "ops_on",
        "parent",
        "step",
        "tasks_on",
        "tasks_recorded",
    )

    def __init__(self, writer: RawWriter) -> None:
        self._writer = writer
        self.step = 0
        self.parent = NO_ID
        self.next_event = 0
        self.tasks_recorded = 0
        self.tasks_on = False
        self.api_on = False
        self.memory_on = False
        self.ops_on = False
        #: (name, start, thread, shapes, dtypes, module, sequence, module path, stack)
        self._op: tuple | None = None

    def op_begin(self, *fields: Any) -> None:
        """A host op opens (see ``RowSink.op_begin``): it takes the next event id."""
        self._op = fields
        self.parent = self.next_event
        self.next_event += 1

    def op_close(self) -> None:
        """No host op is open (the step is not recorded)."""
        self._op = None
        self.parent = NO_ID

    def op_end(self, end: int) -> None:
        """The open host op returned at ``end``: its ``host_events`` row."""
        op = self._op
        if op is None:
            return
        event_id = self.parent
        self._op = None
        self.parent = NO_ID
        name, start, thread, shapes, dtypes, module, sequence, module_path, stack = op
        row = (event_id, "op", name, start, end, thread, -1, NO_ID, NO_ID, self.step,
               shapes, dtypes, module, sequence, module_path, stack)  # fmt: skip
        self._writer.append("host_events", row)


def _row_sink(writer: RawWriter, thread: Callable[[], int], clock: Callable[[], int]) -> Any:
    """A compiled ``RowSink`` the cores write rows into straight (the task and launch rows of
    kernel launches, the allocator's memory rows), or None where the compiled buffers are not
    in use."""
    core = device_native.load()
    rows = getattr(writer, "direct_rows", None)
    if core is None or rows is None:
        return None
    buffers = rows("tasks"), rows("host_events"), rows("memory")
    if not all(isinstance(b, core.RowBuffer) for b in buffers):
        return None
    sink = core.RowSink(
        *buffers,
        _TASK_TYPE_TEXT,
        _ACTION_TEXT,
        thread,
        _tensor_texts,
        _attr_columns,
        writer.after_direct_rows,
        writer.chunk_rows,
        CLOCK_EVERY,
    )
    # the host clock the adapter's compiled per-op path has the sink read when it opens and
    # closes a host op (an engine's HostClock is read there without a call)
    sink.clock = clock
    return sink


def thread_name() -> str:
    """The calling thread's name: its ``threading`` name (MainThread, ``Thread-2
    (_pin_memory_loop)`` ...), or for a thread Python did not start (the autograd engine's
    device thread shows as ``Dummy-1``) the name the OS knows it by (``pt_autograd_0``); while
    it runs a backward, the device thread's name (:mod:`msprof_py.adapter.backward_thread`)."""
    if backward_thread.in_backward():
        return backward_thread.device_thread_name()[:THREAD_NAME_LIMIT]
    current = threading.current_thread()
    name = current.name
    if isinstance(current, threading._DummyThread):
        with contextlib.suppress(OSError):
            comm = Path(f"/proc/self/task/{threading.get_native_id()}/comm")
            name = comm.read_text(encoding="utf-8", errors="replace").strip() or name
    return name[:THREAD_NAME_LIMIT]


class Recorder:
    """Records one process's device activity into a raw profile."""

    def __init__(
        self,
        writer: RawWriter,
        clock: Callable[[], int],
        *,
        warmup: int = 0,
        iteration: int | None = None,
        record_tasks: bool = True,
        record_memory: bool = True,
        record_api: bool = True,
        logical_threads: bool = False,
        steps_from: str = "optimizer",
        with_stack: bool = False,
    ) -> None:
        self.writer = writer
        #: ``msprof --with-stack``: the Python stack of every host op (None: not recorded)
        self.stacks = StackRecorder() if with_stack else None
        self.steps_from = parse_steps_from(steps_from)
        #: the ``thread`` column: OS thread idents, or (``logical_threads``, for deterministic
        #: runs) 1, 2, ... in the order threads first record something
        self._thread: Callable[[], int] = (
            self._logical_thread if logical_threads else self._os_thread
        )
        self._thread_ids: dict[int, int] = {}
        #: the name of every thread that recorded something, by its ``thread`` column value
        #: (a string: meta.json lists it as ``threads``); replaced, never changed in place, so
        #: a flush writing meta.json on another thread never sees it change under it
        self.thread_names: dict[str, str] = {}
        self._meta: dict | None = getattr(writer, "meta", None)
        if self._meta is not None:
            self._meta["threads"] = self.thread_names
        self._flushed_a_step = False
        self._clock = clock
        self.warmup = warmup
        self.iteration = iteration
        self.record_tasks = record_tasks
        self.record_memory = record_memory
        self.record_api = record_api
        #: the compiled sink the engine core writes launch rows into while this recorder is
        #: the bus's only subscriber (:class:`~msprof_py.device.records.RecordBus`), or None
        self.direct_sink = _row_sink(writer, self._thread, clock)
        self._live: Any = self.direct_sink if self.direct_sink is not None else _RowState(writer)
        self._step_start = 0
        self._explicit_steps = False
        self._last_source = ""
        #: the modules running now (the session's wrapper of Module.__call__ keeps it)
        self.modules = ModuleStack()
        self.recording = warmup == 0 and (iteration is None or iteration > 0)
        #: the real wall clock (``perf_counter_ns``) when recording began: measured waits
        #: count from it
        self.wall_origin = time.perf_counter_ns()
        #: write measured waits (not in deterministic runs: their raw tables are
        #: byte-identical from run to run, and a wall-clock figure never is)
        self.measure_waits = not logical_threads
        self.finished = not self.recording and iteration == 0
        #: graph plans recorded (``graphs.plan_id``) and the graphs planned so far
        self._next_plan = 0
        self._planned: set[str] = set()
        #: (plan_id, graph, mode, passes) of every plan, for fusion_result.json at the end
        #: (a few records per graph)
        self.fusion: list[tuple[int, str, str, tuple]] = []
        #: called once when the iteration window is over (the session detaches the recorder)
        self.on_finished: Callable[[], None] | None = None
        self._on_record: dict[type, Callable[[Any], None]] = {
            TaskRecord: self._task,
            HostRecord: self._host,
            MemoryRecord: self._memory,
            GraphRecord: self._graph,
        }

    # ---- the state rows read (kept in the row sink's fields) ----------------------------

    @property
    def step(self) -> int:
        """The step being recorded (0, 1 ... counting warm-up steps)."""
        return self._live.step

    @step.setter
    def step(self, value: int) -> None:
        self._live.step = value

    @property
    def recording(self) -> bool:
        """The current step is inside the iteration window: rows are written."""
        return self._recording

    @recording.setter
    def recording(self, value: bool) -> None:
        self._recording = value
        self._live.ops_on = value
        self._live.tasks_on = value and self.record_tasks
        self._live.api_on = value and self.record_api
        self._live.memory_on = value and self.record_memory

    @property
    def tasks_recorded(self) -> int:
        """Task rows written so far."""
        return self._live.tasks_recorded

    # ---- the step window ----------------------------------------------------------------

    def _in_window(self, step: int) -> bool:
        if step < self.warmup:
            return False
        return self.iteration is None or step < self.warmup + self.iteration

    def end_step(self, source: str, now: int) -> None:
        """A step ended (marked by ``source``: ``optimizer#<index>`` for an optimizer's
        step(), plain ``optimizer`` when the index is unknown)."""
        source, optimizer = split_source(source)
        chosen = self.steps_from
        if (
            source == "optimizer"
            and chosen != "optimizer"
            and (chosen == "marks" or optimizer != int(chosen))
        ):
            return  # not a step boundary under --steps-from
        if source in EXPLICIT_STEP_SOURCES:
            first_explicit = not self._explicit_steps
            self._explicit_steps = True
            if first_explicit and self._last_source == "optimizer":
                # the script marks its steps itself, just after optimizer.step() marked this
                # boundary: the explicit mark confirms it rather than ending a sliver step
                self._last_source = source
                return
        elif self._explicit_steps and source == "optimizer":
            return  # the script marks its steps itself
        self._last_source = source
        if self.recording:
            row = (self.step, self._step_start, now, source, optimizer)
            self.writer.append("steps", row)
            # bound what a hard crash (os._exit, a segfault) loses: the first recorded step
            # goes to disk at once, later ones at least every FLUSH_INTERVAL_S
            if not self._flushed_a_step:
                self._flushed_a_step = True
                self.writer.flush()
            else:
                self.writer.flush_if_due()
        self.step += 1
        self._step_start = now
        self.recording = self._in_window(self.step)
        if self.iteration is not None and self.step >= self.warmup + self.iteration:
            self.finished = True
            if self.on_finished is not None:
                self.on_finished()

    def step_open(self) -> bool:
        """True when work has been recorded since the last step boundary."""
        return self._clock() > self._step_start

    # ---- host ops (the adapter's observer) ----------------------------------------------

    def op_begin(self, name: str, args: tuple) -> None:
        """An ATen op (or copy, fused op ...) starts on the host."""
        live = self._live
        if not self.recording:
            live.op_close()
            return
        shapes, dtypes = _arg_shapes(args)
        modules = self.modules
        stacks = self.stacks
        live.op_begin(
            name,
            self._clock(),
            self._thread(),
            shapes,
            dtypes,
            modules.class_path,
            _sequence_number(),
            modules.instance_path,
            stacks.capture(sys._getframe(1)) if stacks is not None else "",
        )

    def _logical_thread(self) -> int:
        ident = backward_thread.current_ident()
        logical = self._thread_ids.get(ident)
        if logical is None:
            logical = self._thread_ids[ident] = len(self._thread_ids) + 1
            self._name_thread(logical)
        return logical

    def _os_thread(self) -> int:
        ident = backward_thread.current_ident()
        if ident not in self._thread_ids:  # once per thread: its name
            self._thread_ids[ident] = ident
            self._name_thread(ident)
        return ident

    def _name_thread(self, thread: int) -> None:
        """Note the calling thread's name under its ``thread`` column value."""
        names = {**self.thread_names, str(thread): thread_name()}
        self.thread_names = names
        if self._meta is not None:
            self._meta["threads"] = names

    def op_end(self) -> None:
        """The op returned: its ``host_events`` row."""
        self._live.op_end(self._clock())

    def annotation(self, name: str, start: int, end: int, step: int | None = None) -> int | None:
        """A user range (``msprof_py.annotate``, ``record_function``), in the step it began;
        returns its event id (None when nothing is recorded now)."""
        if not self.recording:
            return None
        live = self._live
        event_id = live.next_event
        live.next_event = event_id + 1
        self.writer.append(
            "host_events",
            (
                event_id,
                "annotation",
                name,
                start,
                end,
                self._thread(),
                -1,
                NO_ID,
                NO_ID,
                self.step if step is None else step,
                "",
                "",
                self.modules.class_path,
                NO_ID,
                self.modules.instance_path,
                "",
            ),
        )
        return event_id

    def measured_wait(
        self, event_id: int, name: str, began: int, wall_ns: int, step: int | None
    ) -> None:
        """The real wall time of data-loading range ``event_id`` (an annotation) that began
        at ``began`` (``perf_counter_ns``), measured on this host: written beside the timeline
        (``measured_waits``), never into it."""
        if self.recording and self.measure_waits:
            row = (
                event_id,
                name,
                began - self.wall_origin,
                max(0, int(wall_ns)),
                self.step if step is None else step,
            )
            self.writer.append("measured_waits", row)

    # ---- device records (bus subscriber) ------------------------------------------------

    def __call__(self, record: Record) -> None:
        handle = self._on_record.get(type(record))
        if handle is not None:
            handle(record)

    def _memory(self, m: MemoryRecord) -> None:
        if self.recording and self.record_memory:
            self.writer.append(
                "memory",
                (
                    m.time_ns,
                    _ACTION_TEXT[m.action],
                    m.address,
                    m.size,
                    m.allocated,
                    m.reserved,
                    m.active,
                    m.stream_id,
                    m.tag,
                    self.step,
                ),
            )

    def _task(self, t: TaskRecord) -> None:
        if not self.recording or not self.record_tasks:
            return
        attrs = t.attrs
        live = self._live
        parent = live.parent
        live.tasks_recorded += 1
        self.writer.append(
            "tasks",
            (
                t.task_id,
                t.stream_id,
                _TASK_KIND_TEXT[t.kind],
                _TASK_TYPE_TEXT[t.task_type],
                t.name,
                t.op_type,
                t.block_dim,
                t.launch_ns,
                t.start_ns,
                t.end_ns,
                t.wait_ns,
                t.flops,
                t.bytes,
                *_tensor_texts(
                    (
                        t.input_shapes,
                        t.input_dtypes,
                        t.input_formats,
                        t.output_shapes,
                        t.output_dtypes,
                        t.output_formats,
                    )
                ),
                *_attr_columns(attrs),
                t.cube_ns,
                t.vector_ns,
                t.memory_ns,
                parent,
                live.step,
            ),
        )

    def _graph(self, g: GraphRecord) -> None:
        """A graph plan: its rows in ``graphs``, ``graph_passes`` and ``graph_kernels``.

        Written whatever the step window (a graph compiled in a warm-up step runs in the
        recorded ones): a plan is description, not activity."""
        plan_id = self._next_plan
        self._next_plan += 1
        replan = g.graph in self._planned
        self._planned.add(g.graph)
        append = self.writer.append
        self.fusion.append((plan_id, g.graph, g.mode, g.passes))
        append(
            "graphs",
            (
                plan_id,
                g.graph,
                g.mode,
                g.dynamic,
                replan,
                g.nodes,
                g.op_nodes,
                g.eager_kernels,
                len(g.kernels),
                g.fused_kernels,
                g.workspace_bytes,
                g.no_reuse_bytes,
                g.reuse_ratio,
                g.live_peak_bytes,
                g.reused_blocks,
                g.streams,
                g.events,
                g.compile_ns,
                g.code,
                g.compiles,
                g.recompile_limit,
                g.time_ns,
                self.step,
            ),
        )
        for i, p in enumerate(g.passes):
            append(
                "graph_passes",
                (plan_id, g.graph, i, p.pass_name, _joined(p.nodes), p.hit, p.reason),
            )
        for i, k in enumerate(g.kernels):
            append(
                "graph_kernels",
                (
                    plan_id,
                    g.graph,
                    i,
                    k.name,
                    k.op_type,
                    k.task_type,
                    _joined(k.members),
                    k.pass_name,
                    k.stream,
                    ";".join(str(w) for w in k.waits),
                    k.duration_ns,
                    ";".join(str(o) for o in k.output_offsets),
                    ";".join(str(o) for o in k.output_sizes),
                    k.module,
                    k.module_path,
                ),
            )

    def _host(self, h: HostRecord) -> None:
        kind = h.kind
        if kind is HostKind.API and h.name.startswith(STEP_PREFIX):
            self.end_step(h.name[len(STEP_PREFIX) :], h.end_ns)
            return
        if not self.recording or not self.record_api:
            return
        live = self._live
        event_id = live.next_event
        live.next_event = event_id + 1
        parent = live.parent
        thread = self._thread() if kind is not HostKind.PYTHON else 0
        self.writer.append(
            "host_events",
            (
                event_id,
                _HOST_KIND_TEXT[kind],
                h.name,
                h.start_ns,
                h.end_ns,
                thread,
                h.stream_id,
                h.task_id,
                parent,
                self.step,
                "",
                "",
                "",
                NO_ID,
                "",
                "",
            ),
        )
