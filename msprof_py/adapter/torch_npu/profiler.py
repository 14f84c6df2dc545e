"""``torch_npu.profiler``: the torch_npu profiling API, with its real signatures.

Under ``msprof`` the run is already recorded: ``prof.step()`` marks the steps. Without the
launcher, ``profile.start()`` opens a recording session itself (the same collectors), writing a
``{hostname}_{pid}_{time}_ascend_pt`` folder into the ``tensorboard_trace_handler`` folder (or
the current one) when it stops; the schedule's skip_first + wait + warmup steps are skipped and
its first ``active`` steps recorded. (This module maps the API onto the collectors, the layer
above the adapter; it imports them only when a profile starts.)
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from msprof_py.adapter import steps


class ProfilerActivity(enum.Enum):
    """What to profile."""

    CPU = "CPU"
    NPU = "NPU"


class ProfilerAction(enum.Enum):
    """What a schedule asks for at a step."""

    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


class ProfilerLevel:
    """Collection levels of ``_ExperimentalConfig``."""

    Level_none = "Level_none"
    Level0 = "Level0"
    Level1 = "Level1"
    Level2 = "Level2"


class AiCMetrics:
    """AI Core PMU metric groups of ``_ExperimentalConfig``."""

    AiCoreNone = "AiCoreNone"
    PipeUtilization = "PipeUtilization"
    ArithmeticUtilization = "ArithmeticUtilization"
    Memory = "Memory"
    MemoryL0 = "MemoryL0"
    MemoryUB = "MemoryUB"
    ResourceConflictRatio = "ResourceConflictRatio"
    L2Cache = "L2Cache"


class ExportType:
    """Output types of ``_ExperimentalConfig``."""

    Text = "text"
    Db = "db"


@dataclass
class _ExperimentalConfig:
    """torch_npu's experimental profiler settings (accepted and kept)."""

    export_type: str | list[str] = ExportType.Text
    profiler_level: str = ProfilerLevel.Level0
    aic_metrics: str = AiCMetrics.AiCoreNone
    l2_cache: bool = False
    op_attr: bool = False
    data_simplification: bool = True
    record_op_args: bool = False
    gc_detect_threshold: float | None = None
    msprof_tx: bool = False


def schedule(
    wait: int, active: int, warmup: int = 0, repeat: int = 0, skip_first: int = 0
) -> Callable[[int], ProfilerAction]:
    """The step schedule of ``torch.profiler.schedule``."""
    if wait < 0 or warmup < 0 or active <= 0 or repeat < 0 or skip_first < 0:
        raise ValueError("invalid profiler schedule arguments")

    def action(step: int) -> ProfilerAction:
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        cycle = wait + warmup + active
        if repeat and step // cycle >= repeat:
            return ProfilerAction.NONE
        position = step % cycle
        if position < wait:
            return ProfilerAction.NONE
        if position < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD if position < cycle - 1 else ProfilerAction.RECORD_AND_SAVE

    return action


def tensorboard_trace_handler(
    dir_name: str | None = None,
    worker_name: str | None = None,
    analyse_flag: bool = True,
    async_mode: bool = False,
) -> Callable[[profile], None]:
    """An ``on_trace_ready`` handler; msprof writes the profile, so this keeps the target only."""

    def handler(prof: profile) -> None:
        prof.trace_dir = dir_name

    handler.dir_name = dir_name  # type: ignore[attr-defined]
    return handler


class profile:
    """``torch_npu.profiler.profile``: marks each ``step()`` as a training step boundary."""

    def __init__(
        self,
        activities: Iterable[ProfilerActivity] | None = None,
        schedule: Callable[[int], ProfilerAction] | None = None,
        on_trace_ready: Callable[[profile], Any] | None = None,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
        with_flops: bool = False,
        with_modules: bool = False,
        experimental_config: _ExperimentalConfig | None = None,
        use_cuda: bool | None = None,
    ) -> None:
        self.activities = set(activities or (ProfilerActivity.CPU, ProfilerActivity.NPU))
        self.schedule = schedule
        self.on_trace_ready = on_trace_ready
        self.record_shapes = record_shapes
        self.profile_memory = profile_memory
        self.with_stack = with_stack
        self.with_flops = with_flops
        self.with_modules = with_modules
        self.experimental_config = experimental_config or _ExperimentalConfig()
        self.step_num = 0
        self.trace_dir: str | None = None

    def start(self) -> None:
        """Begin profiling (opens a recording session unless msprof already records)."""
        from msprof_py.collectors.session import active_session, start_session

        if active_session() is None:
            self._session = start_session(self._session_config())

    def stop(self) -> None:
        """End profiling: write the profile (when this profile opened the session), then call
        ``on_trace_ready``."""
        session = getattr(self, "_session", None)
        if session is not None:
            self.trace_dir = str(session.stop() or "")
        if self.on_trace_ready is not None:
            self.on_trace_ready(self)

    def _session_config(self) -> Any:
        from msprof_py.adapter import runtime
        from msprof_py.collectors.session import SessionConfig

        output = getattr(self.on_trace_ready, "dir_name", None) or "."
        warmup, iteration = 0, None
        if self.schedule is not None:
            actions = [self.schedule(i).name for i in range(10_000)]
            recording = [i for i, a in enumerate(actions) if a.startswith("RECORD")]
            if recording:
                warmup = recording[0]
                ends = [i for i in recording if actions[i] == "RECORD_AND_SAVE"]
                iteration = (ends[0] if ends else recording[-1]) - warmup + 1
        config = SessionConfig(output=output, warmup=warmup, iteration=iteration)
        state = runtime.STATE
        if state is not None:  # keep the device the script installed
            origin = state.npu.spec.origin
            config.device = origin.removeprefix("preset ")
            config.numerics = state.settings.numerics
            config.host_time = state.settings.host_time
        return config

    def step(self) -> None:
        """Mark the end of a training step."""
        steps.mark_step("torch_npu.profiler")
        self.step_num += 1

    def __enter__(self) -> profile:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
