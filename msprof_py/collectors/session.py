"""A recording session: one process's profile, from start to a flushed, loadable end.

``Session.start()`` installs the npu device, attaches the recorder and the hooks that mark
steps (``optimizer.step()``), module paths and annotations, and makes sure the profile is
flushed however the process ends: normal exit, an uncaught exception (including the simulated
OOM), SIGINT or SIGTERM. A forked child (a DataLoader worker) records nothing.

``Session(config, in_process=True)`` is the mode of :func:`msprof_py.record`: a session that is
one of many in the process. It installs no exit, exception or signal handler, starts its steps
at the current host time, and removes its hooks again when it stops.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime as dt
import os
import platform
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import msprof_py
from msprof_py import adapter
from msprof_py.adapter import runtime, steps
from msprof_py.collectors import orphans
from msprof_py.collectors.config import PROFILE_DONE, SessionConfig
from msprof_py.collectors.module_calls import follow_module_calls
from msprof_py.collectors.optim_mode import optimizer_mode
from msprof_py.collectors.recorder import Recorder
from msprof_py.profile.schema import DATA_LOADING, FORMAT_VERSION, RAW_DIR
from msprof_py.profile.writer import RawWriter

#: a second SIGINT this soon after the first is the same interrupt (see Session._on_sigint)
SIGINT_REPEAT_S = 0.5
#: environment variables recorded in the run metadata (those that change what a run does)
RECORDED_ENV = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TASK_QUEUE_ENABLE",
    "ASCEND_LAUNCH_BLOCKING",
    "PYTORCH_NPU_ALLOC_CONF",
    "HCCL_ALGO",
    "OMP_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
    "ASCEND_RT_VISIBLE_DEVICES",
)


def run_dir_name(now: dt.datetime | None = None, pid: int | None = None) -> str:
    """``{hostname}_{pid}_{YYYYmmddHHMMSSfff}_ascend_pt``, as torch_npu's profiler names it."""
    now = now or dt.datetime.now()
    stamp = now.strftime("%Y%m%d%H%M%S%f")[:-3]
    return f"{socket.gethostname()}_{pid or os.getpid()}_{stamp}_ascend_pt"


def _versions() -> dict[str, str]:
    return {
        "msprof_py": msprof_py.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }


def _rank() -> tuple[int, int]:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


#: ``os._exit`` before the session wraps it (the SIGTERM watchdog exits with it)
_real_exit = os._exit
#: seconds a script has to end on SIGTERM before the session ends it (the profile saved first)
SIGTERM_GRACE_S = 10.0


class Session:
    """Records this process into ``<output>/<run dir>/msprof_raw``."""

    def __init__(self, config: SessionConfig, *, in_process: bool = False) -> None:
        self.config = config
        #: one of many sessions in this process (no exit handlers; hooks removed on stop)
        self.in_process = in_process
        self.pid = os.getpid()
        self._launcher_pid = os.getppid()
        self.run_dir = Path(config.output).resolve() / run_dir_name(pid=self.pid)
        self.status = "running"
        self.recorder: Recorder | None = None
        self.writer: RawWriter | None = None
        self._stopped = False
        self._lock = threading.Lock()
        self._previous_excepthook = sys.excepthook
        self._hooks: list[Any] = []
        self._restore: list[Any] = []  # undo the patches of the hooks (in-process mode)
        self._last_sigint = -SIGINT_REPEAT_S
        self._discounted_from = 0
        self._children_stopped = False

    # ---- lifecycle ----------------------------------------------------------------------

    def start(self) -> Session:
        """Install the device, attach the recorder and the exit handlers."""
        cfg = self.config
        npu = adapter.install(cfg.device, cfg.numerics, cfg.host_time)
        engine = npu.engine
        rank, world = _rank()
        meta = {
            "format_version": FORMAT_VERSION,
            "status": self.status,
            "command": cfg.command or " ".join(sys.argv),
            # where the command ran (a relative script path resolves from here)
            "cwd": os.getcwd(),
            "device": npu.spec.name,
            "device_origin": npu.spec.origin,
            # the spec itself: readers rebuild it from here, never from a path
            "device_spec": dict(npu.spec.raw),
            "soc_version": npu.spec.soc_version,
            "key_figures": npu.spec.key_figures(),
            "ai_core_num": npu.spec.cube.cores,
            "aiv_num": npu.spec.vector.cores,
            "aic_frequency_mhz": npu.spec.cube.clock_hz / 1e6,
            "numerics": cfg.numerics,
            "host_time": cfg.host_time,
            "deterministic": cfg.deterministic,
            "warmup": cfg.warmup,
            "iteration": cfg.iteration,
            "steps_from": cfg.steps_from,
            # what was recorded (msprof --task-time, --sys-hardware-mem, --ascendcl): an
            # empty table then means "nothing happened", not "not asked for"
            "record_tasks": cfg.task_time,
            "record_memory": cfg.sys_hardware_mem,
            "record_api": cfg.ascendcl,
            "with_stack": cfg.with_stack,
            "rank": rank,
            "world_size": world,
            "hostname": socket.gethostname(),
            "pid": self.pid,
            "start_time": dt.datetime.now().isoformat(timespec="milliseconds"),
            "versions": _versions(),
            "env": {k: os.environ[k] for k in RECORDED_ENV if k in os.environ},
            "run_dir": self.run_dir.name,
        }
        self.writer = RawWriter(self.run_dir / RAW_DIR, meta)
        self.recorder = Recorder(
            self.writer,
            engine.host_clock(),  # read with no Python frame (twice per recorded op)
            warmup=cfg.warmup,
            iteration=cfg.iteration,
            record_tasks=cfg.task_time,
            record_memory=cfg.sys_hardware_mem,
            record_api=cfg.ascendcl,
            logical_threads=cfg.deterministic,
            steps_from=cfg.steps_from,
            with_stack=cfg.with_stack,
        )
        self._discounted_from = runtime.state().discounted_ns
        self.recorder.on_finished = self._detach  # the window is over: stop paying
        self.recorder._step_start = engine.host_ns  # the first step starts now
        npu.subscribe(self.recorder)
        runtime.state().observer = self.recorder
        self._install_hooks()
        if self.in_process:
            return self
        atexit.register(self._at_exit)
        sys.excepthook = self._excepthook
        with contextlib.suppress(ValueError):  # not the main thread: no signal handlers
            signal.signal(signal.SIGTERM, self._on_sigterm)
            if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
                signal.signal(signal.SIGINT, self._on_sigint)
        os.register_at_fork(after_in_child=self._disable_in_child)
        self._wrap_os_exit()
        return self

    def _wrap_os_exit(self) -> None:
        """``os._exit`` skips every exit handler: flush the profile first (this process's
        session only; a forked child's call goes straight through)."""
        real_exit = os._exit
        owner = os.getpid()

        def _exit(code: int) -> None:
            if os.getpid() == owner:
                with contextlib.suppress(Exception):  # exiting comes first, whatever happens
                    self.stop(self.status if self.status != "running" else "completed")
            real_exit(code)

        os._exit = _exit

    def _detach(self) -> None:
        state = runtime.STATE
        if state is not None:
            state.npu.unsubscribe(self.recorder)
            if state.observer is self.recorder:
                state.observer = None
        if self.writer is not None and self.pid == os.getpid():
            self.writer.flush()

    def stop(self, status: str = "completed") -> Path | None:
        """Flush everything; return the run directory (None if nothing was recorded).

        Ctrl-C is held off while the profile is saved: a second press (the first one seemed
        not to work, under load) would interrupt the flush and the exit that follows it."""
        with self._lock:
            if self._stopped or self.pid != os.getpid() or self.writer is None:
                return None
            self._stopped = True
        with _sigint_held():
            return self._save(status)

    def _save(self, status: str) -> Path | None:
        assert self.writer is not None
        recorder = self.recorder
        assert recorder is not None
        self._detach()
        if self.in_process:
            self._remove_hooks()
        engine = runtime.state().npu.engine
        if recorder.recording and recorder.step_open():
            recorder.end_step("end of run", engine.host_ns)
        rank, world = _rank()
        self.writer.meta.update(
            status=status,
            rank=rank,
            world_size=world,
            end_time=dt.datetime.now().isoformat(timespec="milliseconds"),
            host_end_ns=engine.host_ns,
            device_end_ns=max((s.tail_ns for s in engine.streams.values()), default=0),
            steps_seen=recorder.step,
        )
        if self.config.host_time == "measured":
            # the profiler hooks' own time, measured and left out of the Python time
            spent = runtime.state().discounted_ns - self._discounted_from
            self.writer.meta["profiler_hooks_ns"] = spent
        self.writer.flush()
        if not self.writer.folder.exists() and 0 < recorder.step <= self.config.warmup:
            # --warmup skipped every step the script ran: keep the metadata (no rows), so the
            # launcher can say how many steps there were
            self.writer.meta["rows"] = dict(self.writer.rows_written)
            self.writer.write_meta()
            return None
        if not self.writer.folder.exists():
            return None
        self._write_fusion_result(recorder)
        if self.config.export:
            from msprof_py.exporters import export_run

            try:
                export_run(self.run_dir)
            except Exception as exc:  # the raw profile is safe; say what failed, don't crash
                print(f"msprof: export of {self.run_dir} failed: {exc}", file=sys.stderr)
        return self.run_dir

    def _write_fusion_result(self, recorder: Recorder) -> None:
        """``fusion_result.json`` in the run folder when graphs were compiled (a failure is one
        line: the raw profile holds the same records)."""
        if not recorder.fusion:
            return
        from msprof_py.exporters.fusion_result import (
            FILE,
            fusion_result,
            plan_frames,
            write_document,
        )

        try:
            write_document(fusion_result(*plan_frames(recorder.fusion)), self.run_dir / FILE)
        except Exception as exc:
            print(f"msprof: {FILE} of {self.run_dir} not written: {exc}", file=sys.stderr)

    # ---- exit paths ---------------------------------------------------------------------

    def _at_exit(self) -> None:
        self.stop(self.status if self.status != "running" else "completed")
        if self.status in ("running", "exception", "oom"):  # exiting the ordinary way
            self._tell_launcher()
        if self.status == "interrupted" and self.pid == os.getpid():
            # exit the way an interrupted Python exits (killed by SIGINT: status 130), which
            # the interpreter no longer does once a KeyboardInterrupt crossed torch's C++ frames
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        if self.status == "terminated" and self.pid == os.getpid():
            self._stop_children_if_orphaned(signal.SIGTERM)
            # killed by SIGTERM as the script would be without msprof (status 143), even where
            # the SystemExit became another exception on its way out through torch's frames
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    def _tell_launcher(self) -> None:
        """Tell msprof, when it started this process, that the profile is complete (it can
        analyse while this interpreter tears down). Only msprof's own child tells it: the pid
        in the config is no one else's parent, and may belong to another process by now."""
        notify = self.config.notify_pid
        if notify and self.pid == os.getpid() and os.getppid() == notify:
            with contextlib.suppress(OSError):
                os.kill(notify, PROFILE_DONE)

    def _excepthook(self, kind: type[BaseException], value: BaseException, tb: Any) -> None:
        if self.status == "terminated":
            pass  # the SIGTERM's SystemExit, seen as whatever it became on its way out
        elif isinstance(value, adapter.NpuOutOfMemory):
            self.status = "oom"
        elif isinstance(value, KeyboardInterrupt):
            self.status = "interrupted"
        else:
            self.status = "exception"
        self.stop(self.status)
        self._previous_excepthook(kind, value, tb)

    def _on_sigint(self, signum: int, frame: Any) -> None:
        """Ctrl-C as Python has it (``KeyboardInterrupt``), once per interrupt: a SIGINT sent
        to the process group reaches this process directly and again through msprof, which
        forwards what it gets (as torchrun does); the second copy, within
        :data:`SIGINT_REPEAT_S`, would cut the first one's flush short."""
        now = time.monotonic()
        if now - self._last_sigint < SIGINT_REPEAT_S:
            return
        self._last_sigint = now
        raise KeyboardInterrupt

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        """The first SIGTERM ends the script (``SystemExit`` through the exit path, which saves
        the profile). Later ones are ignored: the kernel sends the parent-death signal once per
        thread of the dying msprof, and one landing in the save would cut the profile; the
        watchdog still ends a script that does not exit."""
        self._stop_children_if_orphaned(signum)
        if self.status == "terminated" or self._stopped:
            return
        self.status = "terminated"
        # the SystemExit can land where Python swallows it (a __del__, a callback): if the
        # script still runs after a while, save the profile and end it from another thread
        watchdog = threading.Timer(SIGTERM_GRACE_S, self._terminate_now, args=(signum,))
        watchdog.daemon = True
        watchdog.start()
        raise SystemExit(128 + signum)

    def _stop_children_if_orphaned(self, signum: int) -> None:
        """msprof died: the script's own children stop too (once). The parent-death signal
        can arrive before this process is re-parented, so each SIGTERM and the exit path
        look again."""
        if not self._children_stopped and orphans.orphaned(self._launcher_pid):
            self._children_stopped = True
            orphans.terminate_children(signum)

    def _terminate_now(self, signum: int) -> None:
        """The script did not end on its SIGTERM: save the profile, exit as killed by it
        (nothing to do when its exit is under way: the profile is being saved)."""
        if self._stopped:
            return
        with contextlib.suppress(Exception):
            self.stop("terminated")
            self._stop_children_if_orphaned(signum)
        _real_exit(128 + signum)

    def _disable_in_child(self) -> None:
        self._stopped = True
        state = runtime.STATE
        if state is not None:
            state.observer = None

    # ---- hooks --------------------------------------------------------------------------

    def _install_hooks(self) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        recorder = self.recorder
        assert recorder is not None
        seen: set[int] = set()
        session = self

        optimizers: dict[int, int] = {}  # id(optimizer) -> its index (order of first step)

        def optimizer_step(optimizer: Any, args: Any, kwargs: Any) -> None:
            if id(optimizer) not in seen and session.writer is not None:
                seen.add(id(optimizer))
                modes = session.writer.meta.setdefault("optimizers", {})
                modes.setdefault(type(optimizer).__name__, optimizer_mode(optimizer))
            index = optimizers.setdefault(id(optimizer), len(optimizers))
            steps.mark_step(f"optimizer#{index}")

        def discount(since: int) -> None:
            if runtime.STATE is not None:
                runtime.STATE.discount(since)

        # measured host time: the module stack's own time is the profiler's, not the
        # application's
        measured = self.config.host_time == "measured"
        self._restore.append(follow_module_calls(recorder.modules, discount if measured else None))
        self._watch_process_group()
        self._hooks = [register_optimizer_step_post_hook(optimizer_step)]
        _patch_record_function()
        _patch_grad_scaler()

    def _remove_hooks(self) -> None:
        for handle in self._hooks:
            handle.remove()
        self._hooks = []
        for undo in reversed(self._restore):
            undo()
        self._restore = []

    def _watch_process_group(self) -> None:
        """Note the rank and world size as soon as the script joins a process group (under
        mp.spawn no RANK variable says it, and the group may be gone by the end)."""
        dist = torch.distributed
        if not dist.is_available():
            return
        original = dist.init_process_group
        session = self

        def init_process_group(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            if session.writer is not None:
                session.writer.meta.update(rank=dist.get_rank(), world_size=dist.get_world_size())
            return result

        dist.init_process_group = init_process_group

        def restore() -> None:
            if dist.init_process_group is init_process_group:
                dist.init_process_group = original

        self._restore.append(restore)


@contextlib.contextmanager
def _sigint_held() -> Iterator[None]:
    """Ignore SIGINT in the main thread for the duration (restored afterwards)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


_ACTIVE: Session | None = None


def active_session() -> Session | None:
    """The session recording this process, if any."""
    return _ACTIVE


def start_session(config: SessionConfig) -> Session:
    """Start recording this process (once)."""
    global _ACTIVE
    if _ACTIVE is None:
        _ACTIVE = Session(config).start()
    return _ACTIVE


def set_active_session(session: Session | None) -> Session | None:
    """Make ``session`` the one :func:`active_session` returns (in-process recordings, which
    come and go); return the previous one."""
    global _ACTIVE
    previous, _ACTIVE = _ACTIVE, session
    return previous


def _patch_record_function() -> None:
    """``torch.profiler.record_function`` ranges become annotations; a data-loading range's
    (the DataLoader iterator's ``__next__``) real wall time also goes to ``measured_waits``,
    beside the timeline (see :func:`range_begin`)."""
    from torch.autograd import profiler as autograd_profiler

    cls = autograd_profiler.record_function
    if getattr(cls, "_msprof_patched", False):
        return
    enter, exit_ = cls.__enter__, cls.__exit__

    def patched_enter(self: Any) -> Any:
        self._msprof_range = range_begin(self.name)
        return enter(self)

    def patched_exit(self: Any, *exc: Any) -> Any:
        result = exit_(self, *exc)
        opened = getattr(self, "_msprof_range", None)
        if opened is not None:
            range_end(self.name, opened)
        return result

    cls.__enter__ = patched_enter
    cls.__exit__ = patched_exit
    cls._msprof_patched = True


@dataclass(frozen=True, slots=True)
class OpenRange:
    """A range as it began: host clock, recorder step, and for a data-loading range the real
    wall clock (``perf_counter_ns``; None for other ranges)."""

    host_ns: int
    step: int | None
    wall_ns: int | None


def range_begin(name: str) -> OpenRange:
    """A user or torch range (``record_function``, ``msprof_py.annotate``) begins. With
    measured host time the application's time so far is charged first (the range then spans
    the real time in it); a data-loading range's wall clock is read in both modes."""
    state = runtime.STATE
    if state is not None:
        state.catch_up()
    session = _ACTIVE
    recorder = session.recorder if session is not None else None
    wall = time.perf_counter_ns() if DATA_LOADING.search(name) else None
    return OpenRange(
        state.npu.engine.host_ns if state is not None else 0,
        recorder.step if recorder is not None else None,
        wall,
    )


def range_end(name: str, opened: OpenRange) -> None:
    """The range ``opened`` ends: its annotation (host clock: modelled or measured as the
    run's host time) and, for a data-loading range, its measured wall time beside it."""
    ended = time.perf_counter_ns()
    state = runtime.STATE
    session = _ACTIVE
    if session is None or session.recorder is None or state is None:
        return
    state.catch_up()
    recorder = session.recorder
    event_id = recorder.annotation(name, opened.host_ns, state.npu.engine.host_ns, opened.step)
    if event_id is not None and opened.wall_ns is not None:
        recorder.measured_wait(event_id, name, opened.wall_ns, ended - opened.wall_ns, opened.step)
    state.discount(ended)  # writing the rows is the profiler's time, not the application's


#: GradScaler methods recorded as ``GradScaler.<name>`` annotations (the analysis tells the
#: scaler's own ops - its float64 inverse scale, unscale and inf check - from the user's)
GRAD_SCALER_METHODS = ("scale", "unscale_", "step", "update", "get_scale")


def _patch_grad_scaler() -> None:
    """Each call of a :data:`GRAD_SCALER_METHODS` method runs in a ``record_function`` range
    (one range per call: nothing is added to the per-op path)."""
    from torch.amp import grad_scaler
    from torch.autograd import profiler as autograd_profiler

    cls = grad_scaler.GradScaler
    if getattr(cls, "_msprof_patched", False):
        return
    for name in GRAD_SCALER_METHODS:
        method = getattr(cls, name)

        def wrapped(self: Any, *args: Any, _method: Any = method, _label: str = name, **kw: Any):
            if not getattr(self, "_enabled", True):
                return _method(self, *args, **kw)
            with autograd_profiler.record_function(f"GradScaler.{_label}"):
                return _method(self, *args, **kw)

        wrapped.__name__, wrapped.__doc__ = method.__name__, method.__doc__
        setattr(cls, name, wrapped)
    cls._msprof_patched = True
