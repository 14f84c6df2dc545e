"""The stored profile's schema: every table and column, defined once.

A raw profile is a folder with ``meta.json`` and, per table, Parquet part files
``<table>-<NNNNN>.parquet`` written in bounded chunks while the run goes on. Times are integer
nanoseconds on the simulated clocks (host and device share one time origin: the device's).
Exporters map these names to foreign formats (Ascend CSV headers, Chrome trace fields).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa

from msprof_py.profile.layout import META_FILE as META_FILE
from msprof_py.profile.layout import NO_ID as NO_ID
from msprof_py.profile.layout import RAW_DIR as RAW_DIR

FORMAT_VERSION = 1


@dataclass(frozen=True)
class Column:
    """One column: name, Arrow type and meaning."""

    name: str
    type: pa.DataType
    doc: str


@dataclass(frozen=True)
class Table:
    """One table of the profile."""

    name: str
    doc: str
    columns: tuple[Column, ...]
    #: columns every part must have (others, added in later versions, read as neutral values
    #: from parts written before them)
    required: tuple[str, ...] = ()

    @property
    def names(self) -> list[str]:
        """Column names in order."""
        return [c.name for c in self.columns]

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of the table."""
        return pa.schema([(c.name, c.type) for c in self.columns])


_I64, _I32, _F64, _STR, _BOOL = pa.int64(), pa.int32(), pa.float64(), pa.string(), pa.bool_()

TASKS = Table(
    "tasks",
    "Device tasks: kernels, copies, memsets, event records/waits, collectives.",
    (
        Column("task_id", _I64, "unique per rank, in submission order"),
        Column("stream_id", _I32, "device stream (0 = default stream)"),
        Column("kind", _STR, "kernel | memcpy | memset | event_record | event_wait | collective"),
        Column("task_type", _STR, "AI_CORE, AI_VECTOR_CORE, MIX_AIC, AI_CPU, HCCL, DMA, EVENT"),
        Column("name", _STR, "the op that launched it (aten::mm, TransData, aclrtMemcpyAsync ...)"),
        Column("op_type", _STR, "CANN op type (MatMul, Conv2D, MEMCPY_H2D, TransData ...)"),
        Column("block_dim", _I32, "cores the task launched"),
        Column("launch_ns", _I64, "host clock when the launch reached the device"),
        Column("start_ns", _I64, "device start"),
        Column("end_ns", _I64, "device end"),
        Column("wait_ns", _I64, "gap since the previous task on the stream ended"),
        Column("flops", _F64, "floating-point operations"),
        Column("bytes", _I64, "bytes read and written (as stored, padded for private formats)"),
        Column("input_shapes", _STR, 'shapes as torch_npu writes them: "2,3;4" (";" between)'),
        Column("input_dtypes", _STR, '";"-separated dtype names'),
        Column("input_formats", _STR, '";"-separated formats (ND, NC1HWC0, FRACTAL_Z ...)'),
        Column("output_shapes", _STR, "as input_shapes"),
        Column("output_dtypes", _STR, "as input_dtypes"),
        Column("output_formats", _STR, "as input_formats"),
        Column("copy_kind", _STR, "HOST_TO_DEVICE | DEVICE_TO_HOST | DEVICE_TO_DEVICE, else empty"),
        Column("pinned", _BOOL, "copy from/to page-locked host memory"),
        Column("collective", _STR, "allreduce | allgather | reducescatter | broadcast, else empty"),
        Column("algorithm", _STR, "collective algorithm (mesh, ring, hierarchical(...))"),
        Column("world_size", _I32, "ranks taking part in a collective (0 otherwise)"),
        Column(
            "notify_wait_ns",
            _I64,
            "collectives: the part of the task spent waiting for the peers (HCCL notify wait)",
        ),
        Column(
            "op_state",
            _STR,
            "kernels: dynamic (a prebuilt binary kernel tiled at run time) | static (compiled "
            "for its shapes) | empty (not known: read as static)",
        ),
        Column("cube_ns", _I64, "kernels: modelled cube (MAC) time, 0 otherwise"),
        Column("vector_ns", _I64, "kernels: modelled vector-unit time, 0 otherwise"),
        Column("memory_ns", _I64, "kernels: modelled HBM traffic time (loads + stores), else 0"),
        Column("host_op_id", _I64, "host_events.event_id of the op that launched it, or -1"),
        Column("step", _I32, "training step the launch belongs to, or -1"),
    ),
    ("task_id", "kind", "task_type", "name", "op_type", "launch_ns", "start_ns", "end_ns", "step"),
)

HOST_EVENTS = Table(
    "host_events",
    "Host-side spans on the host clock: ops, launches, syncs, API calls, annotations, steps.",
    (
        Column("event_id", _I64, "unique per rank"),
        Column("kind", _STR, "op | launch | sync | api | python | annotation | step"),
        Column("name", _STR, "aten::addmm, aclrtSynchronizeStream, a user range ..."),
        Column("start_ns", _I64, "host clock"),
        Column("end_ns", _I64, "host clock"),
        Column("thread", _I64, "OS thread id of the caller (0 for device-runtime spans)"),
        Column("stream_id", _I32, "stream of a launch or sync, else -1"),
        Column("task_id", _I64, "task a launch submitted, else -1"),
        Column(
            "parent_id",
            _I64,
            "event_id of the op that made this launch/sync (of an op: the op enclosing it, "
            "imported profiles' nested ops), else -1",
        ),
        Column("step", _I32, "training step, or -1"),
        Column("input_shapes", _STR, "ops: input shapes"),
        Column("input_dtypes", _STR, "ops: input dtypes"),
        Column("module", _STR, "ops: nn.Module path at the time (Model/Block/Conv2d)"),
        Column("sequence", _I64, "ops: autograd sequence number (forward/backward pairs), or -1"),
        Column("module_path", _STR, "ops: nn.Module instance path (layer2.0.conv1), '' on top"),
        Column(
            "stack",
            _STR,
            "ops, msprof --with-stack: the Python call stack, outermost first, frames "
            "file:line(function) joined by ';' (torch and msprof_py frames left out), else ''",
        ),
    ),
    ("event_id", "kind", "name", "start_ns", "end_ns", "step"),
)

MEMORY = Table(
    "memory",
    "Device allocator events, with the statistics right after each.",
    (
        Column("time_ns", _I64, "host clock"),
        Column("action", _STR, "malloc | free | segment_alloc | segment_free | oom"),
        Column("address", _I64, "device address"),
        Column("size", _I64, "bytes"),
        Column("allocated", _I64, "bytes allocated after the event"),
        Column("reserved", _I64, "bytes reserved after the event"),
        Column("active", _I64, "bytes active after the event"),
        Column("stream_id", _I32, "stream the block belongs to"),
        Column("tag", _STR, "what allocated it (the op name)"),
        Column("step", _I32, "training step, or -1"),
    ),
    ("time_ns", "action", "size", "allocated", "reserved", "step"),
)

STEPS = Table(
    "steps",
    "Training steps: ends marked by optimizer.step(), prof.step() or msprof_py.step().",
    (
        Column("step", _I32, "number, from 0 (counting warm-up steps)"),
        Column("start_ns", _I64, "host clock at the start of the step"),
        Column("end_ns", _I64, "host clock at the end of the step"),
        Column("source", _STR, "optimizer | torch_npu.profiler | msprof_py.step | end of run"),
        Column(
            "optimizer_id",
            _I32,
            "optimizer steps: which optimizer ended it (0, 1 ... in the order they first "
            "stepped), else -1",
        ),
    ),
    ("step", "start_ns", "end_ns", "source"),
)

GRAPHS = Table(
    "graphs",
    "Compiled graphs (graph mode, torch.compile(backend='npu')): one row per plan, written "
    "when a graph is compiled or re-planned (also during msprof --warmup steps). Tasks of a "
    "graph launch belong to the host op npu_graph::<graph> (tasks.host_op_id).",
    (
        Column("plan_id", _I64, "unique per rank, in planning order"),
        Column("graph", _STR, "graph name (graph0_forward, graph0_backward, graph1_inference ...)"),
        Column("mode", _STR, "max-autotune | reduce-overhead"),
        Column("dynamic", _BOOL, "compiled with symbolic shapes"),
        Column("replan", _BOOL, "a later plan of a graph planned before (its kernels changed)"),
        Column("nodes", _I32, "IR nodes (inputs, parameters, constants and ops)"),
        Column("op_nodes", _I32, "op nodes"),
        Column("eager_kernels", _I32, "kernels eager mode launches for the same nodes"),
        Column("kernels", _I32, "kernels the graph launches (after the passes)"),
        Column("fused_kernels", _I32, "of those, kernels a fusion pass made"),
        Column("workspace_bytes", _I64, "workspace with lifetime reuse"),
        Column("no_reuse_bytes", _I64, "workspace with every intermediate at its own offset"),
        Column("reuse_ratio", _F64, "1 - workspace_bytes / no_reuse_bytes (0 when empty)"),
        Column("live_peak_bytes", _I64, "most intermediate bytes live at one kernel"),
        Column("reused_blocks", _I32, "workspace blocks sharing bytes with an earlier one"),
        Column("streams", _I32, "streams the stream plan uses"),
        Column("events", _I32, "cross-stream events (waits) it keeps"),
        Column("compile_ns", _I64, "host time the compile took (0 for a re-plan)"),
        Column("code", _STR, "Dynamo code object: name (file:line), '' when unknown"),
        Column("compiles", _I32, "compiles of that code object so far (1 = first), 0 unknown"),
        Column("recompile_limit", _I32, "Dynamo's recompile limit then (eager past it), 0 unknown"),
        Column("time_ns", _I64, "host clock when the plan was made"),
        Column("step", _I32, "training step then, or -1"),
    ),
    ("plan_id", "graph", "kernels"),
)

GRAPH_PASSES = Table(
    "graph_passes",
    "What every graph pass tried on a plan: matched nodes, fired or not, and why not "
    "(the content of GE's fusion_result.json).",
    (
        Column("plan_id", _I64, "graphs.plan_id"),
        Column("graph", _STR, "graph name"),
        Column("index", _I32, "order in which the passes recorded it"),
        Column("pass_name", _STR, "ConvBatchnormFusionPass, AutoFuse, CSEPass ..."),
        Column("nodes", _STR, '";"-separated names of the matched graph nodes'),
        Column("hit", _BOOL, "the pass fired"),
        Column("reason", _STR, "why it did not fire (or a note on a hit), else empty"),
    ),
    ("plan_id", "graph", "pass_name", "hit"),
)

GRAPH_KERNELS = Table(
    "graph_kernels",
    "The kernels a plan launches, in launch order (tasks of its launches carry the same names).",
    (
        Column("plan_id", _I64, "graphs.plan_id"),
        Column("graph", _STR, "graph name"),
        Column("index", _I32, "position in the launch list"),
        Column("name", _STR, "kernel name (the graph node's, as tasks.name)"),
        Column("op_type", _STR, "CANN op type"),
        Column("task_type", _STR, "AI_CORE, AI_VECTOR_CORE, MIX_AIC ..."),
        Column("members", _STR, '";"-separated graph nodes it computes'),
        Column("pass_name", _STR, "fusion pass that made it, '' for a node's own kernel"),
        Column("stream", _I32, "stream index within the graph (0 = the launch stream)"),
        Column("waits", _STR, '";"-separated indices of kernels it waits for (events)'),
        Column("duration_ns", _I64, "planned (modelled) duration"),
        Column("output_offsets", _STR, '";"-separated workspace offsets of its outputs (-1: none)'),
        Column("output_sizes", _STR, '";"-separated workspace bytes of its outputs'),
        Column("module", _STR, "nn.Module class path of its first member (below the compiled one)"),
        Column("module_path", _STR, "nn.Module instance path of it ('' where the graph has none)"),
    ),
    ("plan_id", "graph", "index", "name"),
)

#: names of data-loading ranges (torch's ``enumerate(DataLoader)#...__next__``, a user's
#: ``msprof_py.annotate("data loading")``): their real wall time goes to ``measured_waits``
DATA_LOADING = re.compile(r"dataloader|data[ _]?load", re.IGNORECASE)

MEASURED_WAITS = Table(
    "measured_waits",
    "Real wall time measured on the recording host (perf_counter), kept OUT of the timeline: "
    "what the loop waited in each data-loading range (DataLoader iterator __next__, "
    "msprof_py.annotate('data loading')). With host_time=modeled the timeline gives these "
    "ranges no length; no timeline figure, export, gate or diff reads this table, so two runs "
    "whose loaders take different real times keep identical timelines.",
    (
        Column("event_id", _I64, "host_events.event_id of the range's annotation"),
        Column("name", _STR, "the range's name, as in host_events"),
        Column(
            "wall_start_ns",
            _I64,
            "real wall clock when the range began, ns since the recording started (tells "
            "nested ranges apart; never a timeline time)",
        ),
        Column("wall_ns", _I64, "real wall time from entering the range to leaving it"),
        Column("step", _I32, "training step the range began in, or -1"),
    ),
    ("event_id", "name", "wall_ns", "step"),
)

TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        TASKS,
        HOST_EVENTS,
        MEMORY,
        STEPS,
        GRAPHS,
        GRAPH_PASSES,
        GRAPH_KERNELS,
        MEASURED_WAITS,
    )
}
#: tables written only by graph mode: a profile without them (older, or eager) reads them empty
GRAPH_TABLES = ("graphs", "graph_passes", "graph_kernels")
#: tables of measured (non-deterministic) host figures beside the timeline; a profile without
#: them (older, imported) reads them empty
MEASURED_TABLES = ("measured_waits",)


def default_row(table: str) -> dict[str, object]:
    """A row of ``table`` with every column at its neutral value: ids (``*_id`` but
    ``stream_id``), ``step`` and ``sequence`` at -1, other numbers 0, strings empty, flags
    False. For building profiles by hand (tests, tools): override what matters."""
    row: dict[str, object] = {}
    for column in TABLES[table].columns:
        name, kind = column.name, column.type
        if pa.types.is_integer(kind):
            none = name in ("step", "sequence") or (name.endswith("_id") and name != "stream_id")
            row[name] = NO_ID if none else 0
        elif pa.types.is_floating(kind):
            row[name] = 0.0
        elif pa.types.is_boolean(kind):
            row[name] = False
        else:
            row[name] = ""
    return row
