"""One ``msprof`` invocation: launch the application, then finish and summarise its profile."""

from __future__ import annotations

import datetime as dt
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from msprof_py.collectors.launcher import LaunchError, launch
from msprof_py.collectors.session import SessionConfig
from msprof_py.profile.schema import META_FILE, RAW_DIR
from msprof_py.profile.writer import write_json_atomic

if TYPE_CHECKING:
    from msprof_py.analyzers import Analysis


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
    report: bool = True


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
            candidate = output / f"msprof_{stamp}_{suffix}"
            suffix += 1


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
        self.analysis: Analysis | None = None
        self.exit_code = 0

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
            deterministic=o.deterministic,
            command=" ".join(self.application),
            export=False,
        )
        try:
            self.exit_code = launch(self.application, config)
        except LaunchError:
            self.folder.rmdir()
            raise
        self.rank_dirs = sorted(
            p.parent.parent for p in self.folder.glob(f"*/{RAW_DIR}/{META_FILE}")
        )
        for rank_dir in self.rank_dirs:
            self._finish(rank_dir)
        if self.rank_dirs:
            self._chrome_trace()
            self._analyze()
            if self.options.report:
                self._report()
        return self.exit_code

    def _chrome_trace(self) -> None:
        """Every rank on one Chrome/Perfetto timeline: ``<run folder>/trace.json``."""
        from msprof_py.exporters import write_chrome_trace
        from msprof_py.profile import load

        assert self.folder is not None
        write_chrome_trace(load(self.folder), self.folder / "trace.json")

    def _analyze(self) -> None:
        """Analyse once: the terminal summary and the report both read this analysis."""
        from msprof_py.analyzers import analyze

        assert self.folder is not None
        try:
            self.analysis = analyze(self.folder)
        except Exception as exc:  # the profile is safe; say what failed
            print(f"msprof: analysing the profile failed: {exc}", file=sys.stderr)

    def _report(self) -> None:
        """The HTML report: ``<run folder>/report.html``."""
        from msprof_py.report import write_report

        assert self.folder is not None
        try:
            self.report = write_report(self.folder, analysis=self.analysis)
        except Exception as exc:  # the profile is safe; say what failed
            print(f"msprof: the HTML report failed: {exc}", file=sys.stderr)

    def _finish(self, rank_dir: Path) -> None:
        meta_path = rank_dir / RAW_DIR / META_FILE
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        meta["exit_code"] = self.exit_code
        if meta.get("status") == "running":  # killed before it could say how it ended
            meta["status"] = "killed"
        write_json_atomic(meta_path, meta)
        from msprof_py.exporters import export_run

        try:
            export_run(rank_dir)
        except Exception as exc:  # the raw profile stays loadable; say what failed
            print(f"msprof: Ascend export of {rank_dir.name} failed: {exc}", file=sys.stderr)

    def print_summary(self) -> None:
        """The end-of-run summary on the terminal."""
        from msprof_py.collectors.summary import print_run_summary

        print_run_summary(self.folder, self.rank_dirs, self.exit_code, self.analysis, self.report)
