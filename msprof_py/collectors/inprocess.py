"""In-process recording: profile a block of code, as often as needed, in one process.

    import msprof_py

    with msprof_py.record() as rec:            # installs the npu device if needed
        for batch in loader:
            train_step(batch)                  # steps: optimizer.step() or msprof_py.step()
    analysis = rec.analyze()                   # or rec.load() for the stored profile

Each ``record()`` writes one run folder (``<output>/{host}_{pid}_{time}_ascend_pt``, the same
raw profile ``msprof`` writes). Unlike the launcher's session it can be started and stopped
many times in one process: it installs no exit, exception or signal handler, and its hooks
(optimizer step, module forward, the recorder's subscription) are removed when it stops.

Before it starts, a recording settles the device so that what ran before does not change its
figures: unreachable objects are collected, the device is synchronised, the caching
allocator's free segments go back to the device and its peaks are reset. With
``host_time="modeled"`` the same code then gives the same step times, launches and peak memory
in every recording, in this process or a fresh one (as long as the tensors alive before the
recording are the same).
"""

from __future__ import annotations

import datetime as dt
import gc
import os
import tempfile
import threading
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from msprof_py import adapter
from msprof_py.adapter import runtime
from msprof_py.collectors.session import (
    Session,
    SessionConfig,
    active_session,
    run_dir_name,
    set_active_session,
)
from msprof_py.collectors.stepsource import parse_steps_from

if TYPE_CHECKING:
    from msprof_py.analyzers import Analysis
    from msprof_py.profile import Profile

DEFAULT_DEVICE = "ascend910b"

_lock = threading.Lock()
#: the in-process recording running now (one at a time: the device has one op observer)
_current: Recording | None = None
_fork_hook = False


def _disable_in_child() -> None:
    """A forked child (a DataLoader worker) records nothing."""
    recording = _current
    session = recording.session if recording is not None else None
    if session is not None:
        session._disable_in_child()
        if runtime.STATE is not None and session.recorder is not None:
            runtime.STATE.npu.unsubscribe(session.recorder)


def _device_name(origin: str) -> str:
    return origin.removeprefix("preset ")


def settle_device() -> None:
    """Make the device's state independent of what ran before: collect garbage (freeing the
    npu tensors only cycles still hold), wait for all device work, give the caching
    allocator's free segments back, reset the memory peaks and empty the op compile cache
    (each recording compiles its kernels as a fresh process does; the compile mode stays)."""
    state = runtime.state()
    npu = state.npu
    gc.collect()
    npu.engine.synchronize_device()
    npu.memory.empty_cache()
    npu.memory.reset_peak_stats()
    state.compiled.clear()


class Recording:
    """One in-process recording: a context manager (or ``start()`` / ``stop()``); afterwards
    ``run_dir`` is the profile it wrote, ``load()`` and ``analyze()`` read it.

    Records the code inside ``with record() as rec:`` on the simulated npu device.

    ``output``: the folder the run folder goes into (default: a new temporary folder).
    ``device``, ``numerics``, ``host_time``: how to install the npu device when the process
    has not yet (defaults ``ascend910b``, ``cpu``, ``modeled``); once installed, its settings
    are kept and a different one raises. ``warmup``/``iteration``: the recording window in
    steps (as ``msprof --warmup/--iteration``); ``steps_from``: what ends a step (as
    ``msprof --steps-from``: optimizer, marks or an optimizer index). ``export``: also write
    the Ascend exports. ``with_stack``: record the Python stack of every host op (as
    ``msprof --with-stack``).
    ``settle``: settle the device first (:func:`settle_device`) so figures do not depend on
    what ran before. One recording runs at a time, never inside an ``msprof`` run.
    """

    def __init__(
        self,
        output: str | Path | None = None,
        *,
        device: str | Path | None = None,
        numerics: str | None = None,
        host_time: str | None = None,
        warmup: int = 0,
        iteration: int | None = None,
        steps_from: str = "optimizer",
        export: bool = False,
        settle: bool = True,
        command: str = "",
        with_stack: bool = False,
    ) -> None:
        self.output = Path(output) if output is not None else None
        self._device = device
        self._numerics = numerics
        self._host_time = host_time
        self.warmup = warmup
        self.iteration = iteration
        self.steps_from = parse_steps_from(steps_from)
        self.export = export
        self.settle = settle
        self.command = command
        self.with_stack = with_stack
        self.session: Session | None = None
        self.config: SessionConfig | None = None
        #: the run folder written (None before the stop, or when nothing was recorded)
        self.run_dir: Path | None = None
        #: ``running`` while recording, then completed / exception / oom / interrupted
        self.status = "not started"
        self._previous: Session | None = None
        self._profile: Profile | None = None
        self._analyses: dict[int | None, Analysis] = {}

    # ---- lifecycle ----------------------------------------------------------------------

    def _config(self) -> SessionConfig:
        state = runtime.STATE
        if state is None:
            device = str(self._device or DEFAULT_DEVICE)
            numerics = self._numerics or "cpu"
            host_time = self._host_time or "modeled"
        else:  # keep the device the process installed unless told otherwise
            device = str(self._device or _device_name(state.npu.spec.origin))
            numerics = self._numerics or state.settings.numerics
            host_time = self._host_time or state.settings.host_time
        if self.output is None:
            self.output = Path(tempfile.mkdtemp(prefix="msprof_py_record_"))
        return SessionConfig(
            output=str(self.output),
            device=device,
            numerics=numerics,
            host_time=host_time,
            warmup=self.warmup,
            iteration=self.iteration,
            steps_from=self.steps_from,
            command=self.command or "msprof_py.record",
            export=self.export,
            with_stack=self.with_stack,
        )

    def start(self) -> Recording:
        """Settle the device and start recording."""
        global _current, _fork_hook
        with _lock:
            if self.status != "not started":
                raise RuntimeError("this recording was already started (make a new one)")
            if _current is not None:
                raise RuntimeError("msprof_py.record(): another recording is running")
            other = active_session()
            if other is not None and not other._stopped:
                raise RuntimeError(
                    "msprof_py.record(): this process is already recorded (by msprof or "
                    "torch_npu.profiler); record() cannot run inside another session"
                )
            self.config = config = self._config()
            adapter.install(config.device, config.numerics, config.host_time)
            if self.settle:
                settle_device()
            session = Session(config, in_process=True)
            now = dt.datetime.now()
            for bump in range(1, 10_000):  # never write into an existing run folder
                if not session.run_dir.exists():
                    break
                name = run_dir_name(now + dt.timedelta(milliseconds=bump), session.pid)
                session.run_dir = session.run_dir.parent / name
            session.start()
            self.session = session
            self._previous = set_active_session(session)
            _current = self
            self.status = "running"
            if not _fork_hook:
                os.register_at_fork(after_in_child=_disable_in_child)
                _fork_hook = True
        return self

    def stop(self, status: str = "completed") -> Path | None:
        """Stop recording and write the profile; return its run folder (None: nothing was
        recorded)."""
        global _current
        with _lock:
            if self.status != "running" or self.session is None:
                return self.run_dir
            try:
                self.run_dir = self.session.stop(status)
            finally:
                self.status = status
                set_active_session(self._previous)
                self._previous = None
                if _current is self:
                    _current = None
        return self.run_dir

    def __enter__(self) -> Recording:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if value is None:
            status = "completed"
        elif isinstance(value, adapter.NpuOutOfMemory):
            status = "oom"
        elif isinstance(value, KeyboardInterrupt):
            status = "interrupted"
        else:
            status = "exception"
        self.stop(status)

    # ---- results ------------------------------------------------------------------------

    def _require(self) -> Path:
        if self.status in ("not started", "running"):
            raise RuntimeError(f"the recording is {self.status}: its profile exists after stop")
        if self.run_dir is None:
            raise RuntimeError("nothing was recorded (no npu work ran inside the recording)")
        return self.run_dir

    def load(self) -> Profile:
        """The stored profile (loaded once)."""
        if self._profile is None:
            from msprof_py.profile import load

            self._profile = load(self._require())
        return self._profile

    def analyze(self, warmup: int | None = None, **kwargs: Any) -> Analysis:
        """:func:`msprof_py.analyze` of the profile. ``warmup``: first training steps left out
        (default: 1 when there are at least 2, as ``msprof analyze`` does)."""
        if kwargs:
            from msprof_py.analyzers import analyze

            return analyze(self.load(), warmup=warmup, **kwargs)
        if warmup not in self._analyses:
            from msprof_py.analyzers import analyze

            self._analyses[warmup] = analyze(self.load(), warmup=warmup)
        return self._analyses[warmup]

    def __repr__(self) -> str:
        return f"<Recording {self.status} run_dir={self.run_dir}>"


#: ``with record() as rec:`` (``msprof_py.record``): a :class:`Recording`
record = Recording
