"""One ``msprof`` invocation: launch the application, then finish and summarise its profile."""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib
import io
import json
import os
import shlex
import sys
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msprof_py.collectors.config import SessionConfig
from msprof_py.collectors.launcher import LaunchError, profile_done_notices, start, wait
from msprof_py.exporters.sizes import VIEWER_LIMIT_BYTES
from msprof_py.profile.layout import META_FILE, RAW_DIR

if TYPE_CHECKING:
    from msprof_py.analyzers import Analysis
    from msprof_py.exporters.window import StepWindow


@dataclass(frozen=True)
class RunOptions:
    """The msprof options that shape a run."""

    output: Path
    device: str = "ascend910b"
    numerics: str = "cpu"
    host_time: str = "modeled"
    warmup: int = 0
    iteration: int | None = None
    steps_from: str = "optimizer"
    deterministic: bool = False
    task_time: bool = True
    sys_hardware_mem: bool = True
    ascendcl: bool = True
    #: record the Python stack of every host op
    with_stack: bool = False
    report: bool = True
    #: what to export after the run: ``ascend`` (torch_npu/CANN folders), ``chrome``
    #: (``trace.json``); empty for nothing but the raw profile (and the report)
    export: tuple[str, ...] = ("ascend", "chrome")
    #: the steps the exports cover (None: every recorded step)
    export_steps: StepWindow | None = None
    #: ``trace.json.gz`` instead of ``trace.json``
    export_gzip: bool = False
    #: warn when a JSON trace comes out bigger than this (what a viewer opens well)
    export_warn_bytes: int = VIEWER_LIMIT_BYTES


def new_run_folder(output: Path) -> Path:
    """A fresh ``msprof_<time>`` folder in ``output`` (never an existing one)."""
    if output.exists() and not output.is_dir():
        raise LaunchError(f"--output {output} is a file, not a folder")
    stamp = dt.datetime.now().strftime("%Y%m%d_%H%M%S")
    candidate = output / f"msprof_{stamp}"
    suffix = 1
    while True:
        try:
            candidate.mkdir(parents=True)
            return candidate
        except FileExistsError:
            if not output.is_dir():  # a file where a parent folder should be
                raise LaunchError(f"cannot create --output {output}: a parent is a file") from None
            candidate = output / f"msprof_{stamp}_{suffix}"
            suffix += 1
        except OSError as exc:  # a path under a file, /proc, no permission, a full disk
            why = exc.strerror or _reason(exc)
            raise LaunchError(f"cannot create --output {output}: {why}") from None


#: what finishing a run imports (pandas and the writers behind it): loaded while the
#: application runs, so that its end is not followed by a second of imports
_AFTER_RUN = (
    "msprof_py.profile.loading",
    "msprof_py.exporters.ascend_pt",
    "msprof_py.exporters.chrome",
    "msprof_py.analyzers.api",
    "msprof_py.collectors.summary",
)


def _import_in_background(modules: tuple[str, ...]) -> threading.Thread:
    """Import ``modules`` in a daemon thread (a failure is left for the real import to
    report); the thread, started."""

    def load() -> None:
        for module in modules:
            try:
                importlib.import_module(module)
            except Exception:  # the import where the module is used says why
                continue

    thread = threading.Thread(target=load, name="msprof-imports", daemon=True)
    thread.start()
    return thread


def _beside(work: Callable[[], Any], what: str, inline: bool = False) -> Callable[[], Any]:
    """Run ``work`` in a forked process while the caller goes on (the exports beside the
    analysis: the run's end waits for the longer of the two, not their sum); returns the
    function that waits for it and returns what ``work`` returned (JSON-able; None, with a
    one-line warning naming ``what``, if it died). Where fork is unavailable, with one CPU, or
    ``inline``, ``work`` runs here first.

    What the child prints to ``sys.stdout`` and ``sys.stderr`` is printed by the parent when it
    joins (so it reaches wherever the parent's streams go: a terminal, or a test's capture).
    The child leaves with ``os._exit`` (no exit handler of the parent's runs twice); the caller
    must have no other thread running (an import lock held by one stays held in the child)."""
    if inline or not hasattr(os, "fork") or (os.cpu_count() or 1) < 2:
        result = work()
        return lambda: result
    sys.stdout.flush()
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: do the work, hand its result and its messages over, leave
        code = 1
        try:
            os.close(read_end)
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                result = work()
            payload = json.dumps([result, out.getvalue(), err.getvalue()]).encode()
            with os.fdopen(write_end, "wb") as pipe:
                pipe.write(payload)
            code = 0
        except BaseException:  # Ctrl-C, a broken pipe: the parent sees no result
            pass
        finally:
            os._exit(code)
    os.close(write_end)

    def join() -> Any:
        with os.fdopen(read_end, "rb") as answer:
            payload = answer.read()
        _, status = os.waitpid(pid, 0)
        try:
            result, out, err = json.loads(payload)
        except ValueError:
            code = os.waitstatus_to_exitcode(status)
            print(f"msprof: warning: {what} ended early (exit status {code})", file=sys.stderr)
            return None
        sys.stdout.write(out)
        sys.stderr.write(err)
        return result

    return join


def _ended(exit_code: int) -> str:
    """``the application crashed (signal 11, SIGSEGV)`` / ``... exited with code 3``."""
    if exit_code > 128:
        import signal

        try:
            name = signal.Signals(exit_code - 128).name
        except ValueError:
            name = "unknown signal"
        return f"the application crashed (signal {exit_code - 128}, {name})"
    return f"the application ended without finishing its profile (exit code {exit_code})"


def _reason(exc: BaseException) -> str:
    """One line on why an output failed (``No space left on device`` ...)."""
    if isinstance(exc, OSError) and exc.strerror:
        where = f" ({exc.filename})" if exc.filename else ""
        return f"{exc.strerror}{where}"
    return " ".join(str(exc).split()) or type(exc).__name__


class ProfileRun:
    """Launches the application under recording and finishes every rank's profile."""

    def __init__(self, options: RunOptions, application: list[str]) -> None:
        if not application:
            raise LaunchError('no application given (use --application="python train.py")')
        self.options = options
        self.application = application
        self.folder: Path | None = None
        self.rank_dirs: list[Path] = []
        self.report: Path | None = None
        #: the Chrome/Perfetto trace written (None: not asked for, or it failed)
        self.trace: Path | None = None
        #: rank -> how its recording ended (completed, killed ...)
        self.statuses: dict[int, str] = {}
        self.analysis: Analysis | None = None
        self.exit_code = 0
        #: ``--warmup``/``--iteration`` asked for steps the application did not run (why)
        self.window_error: str | None = None
        self._recorded_nothing = False

    def execute(self) -> int:
        """Run the application; return its exit code."""
        o = self.options
        self.folder = new_run_folder(o.output)
        config = SessionConfig(
            output=str(self.folder),
            device=o.device,
            numerics=o.numerics,
            host_time=o.host_time,
            warmup=o.warmup,
            iteration=o.iteration,
            steps_from=o.steps_from,
            task_time=o.task_time,
            sys_hardware_mem=o.sys_hardware_mem,
            ascendcl=o.ascendcl,
            with_stack=o.with_stack,
            deterministic=o.deterministic,
            command=shlex.join(self.application),
            export=False,
        )
        report = ("msprof_py.report.build",) if self.options.report else ()
        importing = _import_in_background(_AFTER_RUN + report)
        with profile_done_notices() as notify_pid:
            config.notify_pid = notify_pid
            try:
                child = start(self.application, config)
            except LaunchError:
                self.folder.rmdir()
                raise
            code = wait(child, until_done=notify_pid is not None)
            if code is None and not self._profiles_complete():
                code = wait(child)  # another process still records: wait for it all
            if code is not None:
                self.exit_code = code
                self._finish(importing)
                return self.exit_code
            # the profile is complete and the application is exiting: finish the profile
            # beside its teardown, then record how it ended
            try:
                self._finish(importing, exited=False)
            finally:
                code = wait(child)
                assert code is not None
                self.exit_code = code
            for rank_dir in self.rank_dirs:
                self._record_exit(rank_dir)
            self.window_error = self._window_problem()
        return self.exit_code

    def _profiles_complete(self) -> bool:
        """Whether the run recorded something and every recording process has saved its
        profile (none is ``running``)."""
        from msprof_py.profile.meta import MetaError, parse_meta

        assert self.folder is not None
        metas = list(self.folder.glob(f"*/{RAW_DIR}/{META_FILE}"))
        for path in metas:
            try:
                if parse_meta(path.read_bytes()).get("status", "running") == "running":
                    return False
            except (OSError, MetaError):
                return False
        return bool(metas)

    def _finish(self, importing: threading.Thread, exited: bool = True) -> None:
        """Exports, analysis and report of what was recorded. ``exited``: the application has
        exited (its exit code is known and recorded first); otherwise it is still exiting,
        after saving its profile, and its exit code is recorded later."""
        assert self.folder is not None
        self.rank_dirs = sorted(
            p.parent.parent for p in self.folder.glob(f"*/{RAW_DIR}/{META_FILE}")
        )
        exported = [d for d in self.rank_dirs if self._record_exit(d, write=exited)]
        self.window_error = self._window_problem()
        analysed = bool(self.rank_dirs) and not self._recorded_nothing
        chrome = analysed and "chrome" in self.options.export
        importing.join(timeout=60)  # no thread may hold an import lock across a fork
        exports = _beside(
            lambda: self._export(exported, chrome, quiet=analysed),
            "the exports",
            inline=importing.is_alive(),
        )
        try:
            if analysed:
                self._analyze()
        finally:
            trace = exports()
        if isinstance(trace, str):
            self.trace = Path(trace)
        if analysed:
            self._warn_sizes()
            if self.options.report:
                self._report()

    def _export(self, rank_dirs: list[Path], chrome: bool, quiet: bool) -> str | None:
        """The Ascend export of each of ``rank_dirs`` and (``chrome``) the Chrome trace; the
        trace's path (None when none was written). Failures are printed, never raised;
        ``quiet``: warnings of loading the profile are left to the analysis, which loads it
        too (a warning is told once)."""
        with warnings.catch_warnings():
            if quiet:
                warnings.simplefilter("ignore")
            for rank_dir in rank_dirs:
                self._export_rank(rank_dir)
            if chrome:
                self._chrome_trace()
        return None if self.trace is None else str(self.trace)

    def _window_problem(self) -> str | None:
        """Why the recorded window falls short of ``--warmup``/``--iteration`` (None if not)."""
        from msprof_py.profile.meta import MetaError, parse_meta

        o = self.options
        if not o.warmup and o.iteration is None:
            return None
        seen: list[int] = []
        recorded = 0
        for rank_dir in self.rank_dirs:
            try:
                meta = parse_meta((rank_dir / RAW_DIR / META_FILE).read_bytes())
            except (OSError, MetaError):
                continue
            if isinstance(meta.get("steps_seen"), int):
                seen.append(meta["steps_seen"])
            recorded += sum((meta.get("rows") or {}).values())
        self._recorded_nothing = bool(self.rank_dirs) and recorded == 0
        if not seen or self.exit_code != 0:
            return None
        ran = min(seen)
        if o.warmup >= ran:
            self._recorded_nothing = True
            return (
                f"--warmup {o.warmup} skipped every step: the application ran {ran} training "
                f"step(s); nothing was recorded (use --warmup {max(0, ran - 1)} or less)"
            )
        if o.iteration is not None and ran < o.warmup + o.iteration:
            return (
                f"--iteration {o.iteration} after --warmup {o.warmup} asks for steps "
                f"{o.warmup}..{o.warmup + o.iteration - 1}; the application ran {ran} training "
                f"step(s), so {ran - o.warmup} were recorded"
            )
        return None

    def _chrome_trace(self) -> None:
        """Every rank on one Chrome/Perfetto timeline: ``<run folder>/trace.json``."""
        from msprof_py.exporters import write_chrome_trace
        from msprof_py.profile import load

        assert self.folder is not None
        name = "trace.json.gz" if self.options.export_gzip else "trace.json"
        try:
            self.trace = write_chrome_trace(
                load(self.folder), self.folder / name, steps=self.options.export_steps
            )
        except Exception as exc:  # the profile is safe; say what failed, keep the exit code
            print(f"msprof: the Chrome trace failed: {_reason(exc)}", file=sys.stderr)

    def _warn_sizes(self) -> None:
        """A warning for each JSON trace too big for a viewer, with the window that fits."""
        from msprof_py.exporters.sizes import size_warning
        from msprof_py.profile import load

        assert self.folder is not None
        traces = [(self.trace, "--export=ascend")] if self.trace is not None else []
        for rank_dir in self.rank_dirs:
            traces += [
                (p, "--export=chrome") for p in rank_dir.glob("ASCEND_PROFILER_OUTPUT/*.json")
            ]
            traces += [
                (p, "--export=chrome")
                for p in rank_dir.glob("PROF_*/mindstudio_profiler_output/msprof_*.json")
            ]
        big = [
            (path, leave)
            for path, leave in traces
            if path.stat().st_size > self.options.export_warn_bytes or path.suffix == ".gz"
        ]
        if not big:
            return
        try:
            with warnings.catch_warnings():  # loading told its warnings once already
                warnings.simplefilter("ignore")
                steps = load(
                    self.folder,
                    columns={n: ["step"] for n in ("tasks", "host_events", "memory", "steps")},
                ).steps
        except Exception:  # a warning's detail, never a failure
            steps = None
        window = self.options.export_steps
        numbers = sorted({int(x) for x in steps["step"]}) if steps is not None else []
        if window is not None:
            numbers = [n for n in numbers if window.contains(n)]
        for path, leave in big:
            text = size_warning(path, numbers, self.options.export_warn_bytes, leave)
            if text is not None:
                where = path.relative_to(self.folder)
                print(f"msprof: warning: {text.replace(path.name, str(where), 1)}", file=sys.stderr)

    def _analyze(self) -> None:
        """Analyse once: the terminal summary and the report both read this analysis."""
        from msprof_py.analyzers import analyze

        assert self.folder is not None
        try:
            self.analysis = analyze(self.folder)
        except Exception as exc:  # the profile is safe; say what failed
            print(f"msprof: analysing the profile failed: {_reason(exc)}", file=sys.stderr)

    def _report(self) -> None:
        """The HTML report: ``<run folder>/report.html``."""
        from msprof_py.report import write_report

        assert self.folder is not None
        try:
            self.report = write_report(self.folder, analysis=self.analysis)
        except Exception as exc:  # the profile is safe; say what failed
            print(f"msprof: the HTML report failed: {_reason(exc)}", file=sys.stderr)

    def _record_exit(self, rank_dir: Path, write: bool = True) -> bool:
        """Write the application's exit code (and a killed run's status) into the rank's
        ``meta.json`` (unless not ``write``); whether the rank has rows to export."""
        from msprof_py.profile import ProfileError
        from msprof_py.profile.meta import MetaError, parse_meta, write_meta_file

        meta_path = rank_dir / RAW_DIR / META_FILE
        try:
            meta = parse_meta(meta_path.read_bytes())
        except MetaError as exc:  # the run's own meta.json is damaged: say so, exit 2
            raise ProfileError(f"{meta_path} {exc}") from None
        meta["exit_code"] = self.exit_code
        if meta.get("status") == "running":  # killed before it could say how it ended
            meta["status"] = "killed"
            parts = (meta.get("parts") or {}).get("steps", [])
            steps = sum(int(p.get("rows", 0)) for p in parts if isinstance(p, dict))
            print(
                f"msprof: {_ended(self.exit_code)} after {steps} recorded step(s); the profile "
                "holds what was written up to then (a partial profile)",
                file=sys.stderr,
            )
        self.statuses[int(meta.get("rank", 0))] = str(meta.get("status", "running"))
        try:
            if write:
                write_meta_file(meta_path, meta)
        except OSError as exc:  # a full disk: the recorded meta.json stays as it was
            print(f"msprof: could not record the exit code in {meta_path}: {_reason(exc)}",
                  file=sys.stderr)  # fmt: skip
        if "rows" in meta and not any(meta["rows"].values()):
            return False  # no rows (--warmup skipped every step): nothing to export
        return "ascend" in self.options.export

    def _export_rank(self, rank_dir: Path) -> None:
        """The rank's Ascend-compatible profile directories."""
        from msprof_py.exporters import export_run

        try:
            export_run(rank_dir, self.options.export_steps)
        except Exception as exc:  # the raw profile stays loadable; say what failed
            print(
                f"msprof: Ascend export of {rank_dir.name} failed: {_reason(exc)}", file=sys.stderr
            )

    def print_summary(self) -> None:
        """The end-of-run summary on the terminal."""
        from msprof_py.collectors.summary import print_run_summary

        print_run_summary(
            self.folder,
            self.rank_dirs,
            self.exit_code,
            self.analysis,
            self.report,
            trace=self.trace,
            ascend="ascend" in self.options.export,
            statuses=self.statuses,
        )
