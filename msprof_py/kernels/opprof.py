"""The op profiler: profile kernel launches and write what ``msprof op`` writes.

    from msprof_py.kernels import launch
    from msprof_py.kernels.opprof import OpProfiler, profile_launch

    prof = profile_launch(launch(add_custom, 8, x, y, z, 4096))
    prof.write("opprof_out")          # PipeUtilization.csv, trace.json, ... in one folder
    print(prof.summary())

    with OpProfiler(kernel_name="add_custom", launch_count=3) as op:   # every launch inside
        run_training()
    op.write("opprof_out")

One folder per profiled launch (``<index>_<kernel name>/``) holds ``PipeUtilization.csv``
(:mod:`pipeutil`), ``trace.json`` and ``instr_exe.csv`` (:mod:`optrace`), ``roofline.json``
(:mod:`roofline`) and ``findings.txt`` (:mod:`findings`); the top folder holds
``summary.txt``, the text ``msprof op`` prints.
"""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from msprof_py.kernels import optrace, pipeutil
from msprof_py.kernels.findings import Finding, findings, mean_ratios
from msprof_py.kernels.launch import add_observer, remove_observer
from msprof_py.kernels.results import LaunchResult
from msprof_py.kernels.roofline import Roofline, roofline


class OpProfError(Exception):
    """Nothing to profile, or a kernel name that never launched: one line for the user."""


@dataclass
class OpProfile:
    """One profiled launch: the result, its roofline position and findings."""

    result: LaunchResult
    roofline: Roofline
    findings: list[Finding]
    index: int = 0

    @property
    def name(self) -> str:
        """The kernel's name."""
        return self.result.name

    @property
    def folder_name(self) -> str:
        """``<index>_<name>`` with characters unsafe in paths replaced."""
        return f"{self.index}_{re.sub(r'[^A-Za-z0-9_.-]+', '_', self.name)}"

    def write(self, folder: str | Path, *, simulator: bool = False) -> Path:
        """Write this launch's files into ``folder`` (created; with ``simulator``, also the
        ``msprof op simulator`` layout, :mod:`simlayout`); returns it."""
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        pipeutil.write(self.result, out / "PipeUtilization.csv")
        optrace.write_trace(self.result, out / "trace.json")
        optrace.write_instr_table(self.result, out / "instr_exe.csv")
        (out / "roofline.json").write_text(
            json.dumps({"kernel": self.name, **self.roofline.to_dict()}, indent=2),
            encoding="utf-8",
        )
        text = "\n".join(str(f) for f in self.findings) or "no finding"
        (out / "findings.txt").write_text(text + "\n", encoding="utf-8")
        if simulator:
            from msprof_py.kernels.simlayout import write_simulator

            write_simulator(self.result, out)
        return out

    def summary(self) -> str:
        """A few lines: launch shape, time, pipe ratios, roofline, findings."""
        r = self.result
        ratios = mean_ratios(r)
        busy = ", ".join(f"{p} {v:.0%}" for p, v in ratios.items() if v > 0.005)
        lines = [
            f"{r.name}: {r.duration_us:.3f} us, block_dim {r.block_dim} on {r.cores} "
            f"{r.core_type} cores ({r.waves} wave{'s' * (r.waves > 1)}), {r.total_cycles} "
            f"cycles on {r.chip.name}",
            f"  pipes (mean busy share per block): {busy or 'idle'}",
            f"  roofline: {self.roofline.describe()}",
        ]
        lines += [f"  finding: {f}" for f in self.findings] or ["  findings: none"]
        return "\n".join(lines)


def profile_launch(result: LaunchResult, index: int = 0) -> OpProfile:
    """Profile one launch result (roofline position and findings)."""
    return OpProfile(result, roofline(result), findings(result), index)


def write_profiles(
    profiles: list[OpProfile], folder: str | Path, *, simulator: bool = False
) -> Path:
    """Write each profile into ``folder/<index>_<name>/`` (with ``simulator``, each also gets
    its ``simulator/`` per-unit folders) and ``folder/summary.txt``."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    for p in profiles:
        p.write(out / p.folder_name, simulator=simulator)
    text = "\n".join(p.summary() for p in profiles)
    (out / "summary.txt").write_text(text + "\n", encoding="utf-8")
    return out


@dataclass
class OpProfiler:
    """Profile the launches made while it is active (a context manager).

    ``kernel_name``: only launches of that name (shell-style wildcards allowed);
    ``launch_count``: at most that many are profiled (CANN's ``--launch-count``; the rest are
    only counted)."""

    kernel_name: str | None = None
    launch_count: int = 1
    profiles: list[OpProfile] = field(default_factory=list)
    #: every kernel name launched while active, in order (profiled or not)
    launched: list[str] = field(default_factory=list)

    def _seen(self, result: LaunchResult) -> None:
        self.launched.append(result.name)
        if self.kernel_name and not fnmatch.fnmatchcase(result.name, self.kernel_name):
            return
        if len(self.profiles) < self.launch_count:
            self.profiles.append(profile_launch(result, len(self.profiles)))

    def __enter__(self) -> OpProfiler:
        add_observer(self._seen)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        remove_observer(self._seen)

    def check(self, what: str = "the code") -> None:
        """Raise :class:`OpProfError` when nothing was profiled, saying why."""
        if self.profiles:
            return
        if not self.launched:
            raise OpProfError(
                f"no kernel was launched by {what} (msprof op profiles "
                "msprof_py.kernels.launch() calls)"
            )
        names = ", ".join(dict.fromkeys(self.launched))
        raise OpProfError(f"no kernel named {self.kernel_name!r} was launched (launched: {names})")

    def write(self, folder: str | Path, *, simulator: bool = False) -> Path:
        """Write the profiles (see :func:`write_profiles`)."""
        return write_profiles(self.profiles, folder, simulator=simulator)

    def summary(self) -> str:
        """Every profile's summary."""
        return "\n".join(p.summary() for p in self.profiles)
