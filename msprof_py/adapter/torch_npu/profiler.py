"""``torch_npu.profiler``: the torch_npu profiling API, with its real signatures.

Under ``msprof`` the run is already recorded: ``prof.step()`` marks the steps. Without the
launcher, ``profile.start()`` starts an in-process recording (the collectors behind
``msprof_py.record``, so a script may profile several windows one after another), writing a
``{hostname}_{pid}_{time}_ascend_pt`` folder into the ``tensorboard_trace_handler`` folder (or
the current one) when it stops; the schedule's skip_first + wait + warmup steps are skipped and
its first ``active`` steps recorded. (This module maps the API onto the collectors, the layer
above the adapter; it imports them only when a profile starts.)
"""

from __future__ import annotations

import enum
import sys
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
        """Begin profiling: an in-process recording with the Ascend exports (none when msprof
        already records the process: its session records these steps)."""
        from msprof_py.collectors.inprocess import Recording
        from msprof_py.collectors.session import active_session

        if active_session() is not None:
            return
        output = getattr(self.on_trace_ready, "dir_name", None) or "."
        warmup, iteration = self._window()
        command = " ".join(sys.argv) or "torch_npu.profiler"
        self._recording = Recording(
            output, warmup=warmup, iteration=iteration, export=True, settle=False, command=command
        ).start()

    def stop(self) -> None:
        """End profiling: write the profile (when this profile recorded it; ``trace_dir`` is
        its folder), then call ``on_trace_ready``."""
        recording = getattr(self, "_recording", None)
        if recording is not None:
            self.trace_dir = str(recording.stop() or "")
            self._recording = None
        if self.on_trace_ready is not None:
            self.on_trace_ready(self)

    def _window(self) -> tuple[int, int | None]:
        """The schedule's recording window: (warm-up steps, steps recorded or None)."""
        if self.schedule is None:
            return 0, None
        actions = [self.schedule(i).name for i in range(10_000)]
        recording = [i for i, a in enumerate(actions) if a.startswith("RECORD")]
        if not recording:
            return 0, None
        ends = [i for i in recording if actions[i] == "RECORD_AND_SAVE"]
        return recording[0], (ends[0] if ends else recording[-1]) - recording[0] + 1

    def step(self) -> None:
        """Mark the end of a training step."""
        steps.mark_step("torch_npu.profiler")
        self.step_num += 1

    def __enter__(self) -> profile:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
