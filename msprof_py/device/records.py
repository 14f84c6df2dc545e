"""Typed records the simulated device emits, and the bus that delivers them to subscribers.

The device never keeps its history: it emits one record per event to whoever subscribed
(collectors, test logs). With no subscriber, no record object is built at all.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass


class TaskKind(str, enum.Enum):
    """What a device task does."""

    KERNEL = "kernel"
    MEMCPY = "memcpy"
    MEMSET = "memset"
    EVENT_RECORD = "event_record"
    EVENT_WAIT = "event_wait"
    COLLECTIVE = "collective"
    DVPP = "dvpp"  # an image task of a DVPP engine (JPEG decode, VPC resize/crop)


class TaskType(str, enum.Enum):
    """The engine a task runs on, named as msprof's op_summary ``Task Type`` column."""

    AI_CORE = "AI_CORE"  # cube (AIC)
    AI_VECTOR_CORE = "AI_VECTOR_CORE"  # vector (AIV)
    MIX_AIC = "MIX_AIC"  # cube + vector groups
    AI_CPU = "AI_CPU"
    HCCL = "HCCL"
    DMA = "DMA"
    EVENT = "EVENT"
    DVPP = "DVPP"  # the media engines (JPEGD, VPC): their own channels, not AI Cores


class CopyKind(str, enum.Enum):
    """Direction of a memory copy (values follow aclrtMemcpyKind names)."""

    H2H = "HOST_TO_HOST"
    H2D = "HOST_TO_DEVICE"
    D2H = "DEVICE_TO_HOST"
    D2D = "DEVICE_TO_DEVICE"


@dataclass(slots=True)
class TaskRecord:
    """One task on the device timeline. Times are integer ns from the device's time origin.

    ``launch_ns`` is when the host finished submitting the task (the task can start no earlier);
    ``wait_ns`` is the gap between the previous task on the same stream ending and this one
    starting (msprof's *Task Wait Time*).
    """

    task_id: int
    stream_id: int
    kind: TaskKind
    task_type: TaskType
    name: str
    op_type: str
    block_dim: int
    launch_ns: int
    start_ns: int
    end_ns: int
    wait_ns: int
    flops: float = 0.0
    bytes: int = 0
    input_shapes: tuple[tuple[int, ...], ...] = ()
    input_dtypes: tuple[str, ...] = ()
    input_formats: tuple[str, ...] = ()
    output_shapes: tuple[tuple[int, ...], ...] = ()
    output_dtypes: tuple[str, ...] = ()
    output_formats: tuple[str, ...] = ()
    #: kind-specific details: copy direction and pinnedness, collective algorithm, event id ...
    attrs: dict[str, object] | None = None
    #: kernels: the cost model's cube (MAC), vector and HBM-traffic times (ns, each as if it
    #: ran alone; the duration is the scheduling overhead plus the largest), 0 otherwise
    cube_ns: int = 0
    vector_ns: int = 0
    memory_ns: int = 0

    @property
    def duration_ns(self) -> int:
        """Device time the task took."""
        return self.end_ns - self.start_ns


class HostKind(str, enum.Enum):
    """What the host thread was doing during a host record."""

    LAUNCH = "launch"  # submitting a task (the host-side cost of a runtime/aclnn call)
    SYNC = "sync"  # blocked until device work finished (synchronize, blocking memcpy ...)
    API = "api"  # another runtime API call (event create, malloc ...)
    PYTHON = "python"  # time the application spent between calls (measured host time)


@dataclass(slots=True)
class HostRecord:
    """A span of host time: a launch, a blocking wait, or an API call."""

    kind: HostKind
    name: str
    start_ns: int
    end_ns: int
    stream_id: int = -1
    task_id: int = -1


class MemoryAction(str, enum.Enum):
    """Allocator events."""

    MALLOC = "malloc"
    FREE = "free"
    SEGMENT_ALLOC = "segment_alloc"  # the caching allocator reserved memory from the driver
    SEGMENT_FREE = "segment_free"  # ... and gave it back (empty_cache)
    OOM = "oom"


@dataclass(slots=True)
class MemoryRecord:
    """One allocator event with the statistics right after it."""

    time_ns: int
    action: MemoryAction
    address: int
    size: int
    allocated: int
    reserved: int
    active: int
    stream_id: int = 0
    tag: str = ""


@dataclass(frozen=True, slots=True)
class PlannedPass:
    """One pattern a graph pass tried: the nodes it matched, whether it fired, why not."""

    pass_name: str
    nodes: tuple[str, ...]
    hit: bool
    reason: str = ""


@dataclass(frozen=True, slots=True)
class PlannedKernel:
    """One kernel a compiled graph launches, as planned (before it runs).

    ``members``: the graph nodes it computes; ``pass_name``: the fusion pass that made it
    ("" for a node's own kernel); ``waits``: indices of earlier kernels of the graph it waits
    for on another stream; ``output_offsets``/``output_sizes``: where each value it writes
    lives in the graph's workspace (offset -1, size 0: outside it, e.g. a graph output).
    ``module`` / ``module_path``: the nn.Module of its first member that names one.
    """

    name: str
    op_type: str
    task_type: str
    members: tuple[str, ...]
    pass_name: str = ""
    stream: int = 0
    waits: tuple[int, ...] = ()
    duration_ns: int = 0
    output_offsets: tuple[int, ...] = ()
    output_sizes: tuple[int, ...] = ()
    module: str = ""
    module_path: str = ""


@dataclass(slots=True)
class GraphRecord:
    """A compiled graph was planned (compiled, or re-planned when its kernels changed).

    ``time_ns`` is the host clock when the plan was made; ``compile_ns`` the host time its
    compilation took (0 for a re-plan). Sizes in bytes: ``workspace_bytes`` with lifetime
    reuse, ``no_reuse_bytes`` with every intermediate at its own offset, ``live_peak_bytes``
    the most bytes live at once. ``code``/``compiles``/``recompile_limit``: the Dynamo code
    object the graph was compiled for, how often that code object had been compiled by then,
    and the limit past which it runs eagerly (empty / 0 when unknown).
    """

    time_ns: int
    graph: str
    mode: str
    dynamic: bool
    nodes: int
    op_nodes: int
    eager_kernels: int
    workspace_bytes: int
    no_reuse_bytes: int
    live_peak_bytes: int
    reused_blocks: int
    streams: int
    events: int
    compile_ns: int = 0
    code: str = ""
    compiles: int = 0
    recompile_limit: int = 0
    passes: tuple[PlannedPass, ...] = ()
    kernels: tuple[PlannedKernel, ...] = ()

    @property
    def fused_kernels(self) -> int:
        """Kernels a fusion pass made."""
        return sum(1 for k in self.kernels if k.pass_name)

    @property
    def reuse_ratio(self) -> float:
        """Share of the no-reuse workspace that reuse saves (0 when nothing is planned)."""
        if self.no_reuse_bytes <= 0:
            return 0.0
        return 1.0 - self.workspace_bytes / self.no_reuse_bytes


Record = TaskRecord | HostRecord | MemoryRecord | GraphRecord
Subscriber = Callable[[Record], None]


class RecordBus:
    """Delivers records to subscribers. ``active`` is False while nobody listens, so emitters
    can skip building records altogether.

    A subscriber may offer a ``direct_sink`` (a compiled ``RowSink``, see
    ``msprof_py/device/native/rows_core.c``): while it is the only subscriber, ``direct`` is
    that sink, and the compiled engine core writes a kernel launch's rows into it instead of
    emitting the two records (everything else is still emitted). With any other subscriber
    beside it, ``direct`` is None and every record goes through :meth:`emit`."""

    __slots__ = ("_subscribers", "active", "direct")

    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []
        self.active = False
        self.direct: object | None = None

    def subscribe(self, callback: Subscriber) -> None:
        """Deliver every future record to ``callback``."""
        self._subscribers.append(callback)
        self._changed()

    def unsubscribe(self, callback: Subscriber) -> None:
        """Stop delivering to ``callback`` (no error if it was not subscribed)."""
        if callback in self._subscribers:
            self._subscribers.remove(callback)
        self._changed()

    def _changed(self) -> None:
        subscribers = self._subscribers
        self.active = bool(subscribers)
        only = subscribers[0] if len(subscribers) == 1 else None
        self.direct = getattr(only, "direct_sink", None)

    def emit(self, record: Record) -> None:
        """Send ``record`` to every subscriber, in subscription order."""
        for callback in self._subscribers:
            callback(record)
