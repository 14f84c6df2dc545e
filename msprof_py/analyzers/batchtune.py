"""The auto batch tuner for the batch-size finding: the ``msprof tune-batch`` command that
measures the largest batch of the recorded application, and running it (``msprof analyze
--tune-batch``).

The profile's meta records the application's command line (``command``) and the folder it ran
in (``cwd``). The tuner sets the script's batch-size option, so that option is found on the
recorded command line: the option whose value is the batch the profile ran at (``--bs 32``,
``--batch-size=32``), else ``--batch-size``. The tuner runs the script once per batch tried,
in shapes-only mode, from the current batch up (doubling, then bisecting), on the recorded
device; each run is a fresh ``msprof`` process (see :mod:`msprof_py.tune`). No torch here.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from msprof_py.tune.search import Trial, TuneResult, search

#: the tuner's default batch-size option (``msprof tune-batch --batch-arg``)
DEFAULT_OPTION = "--batch-size"
#: command names that are a Python interpreter or a launcher of one
_LAUNCHERS = ("python", "python3", "torchrun")


@dataclass(frozen=True, slots=True)
class TuneRequest:
    """What the tuner runs: the application's arguments, its batch-size option, the device
    (a preset name or a spec file), the folder it runs in, and the tuner's bounds."""

    application: tuple[str, ...]
    option: str
    device: str
    cwd: str
    batch: int
    max_batch: int = 256
    limit: float = 0.8
    granularity: int = 1

    def command(self) -> str:
        """The ``msprof tune-batch`` command line that runs this request (``cd DIR &&`` in
        front when the application ran in another folder than this process's)."""
        argv = [
            "msprof", "tune-batch", f"--device={self.device}", f"--batch-arg={self.option}",
            f"--min-batch={self.batch}", f"--max-batch={self.max_batch}",
            f"--limit={self.limit:g}", f"--granularity={self.granularity}",
            f"--application={shlex.join(self.application)}",
        ]  # fmt: skip
        line = shlex.join(argv)
        if self.cwd and Path(self.cwd) != Path.cwd():
            line = f"cd {shlex.quote(self.cwd)} && {line}"
        return line


def application(meta: dict[str, Any]) -> tuple[str, ...] | None:
    """The recorded application as arguments, when it is a Python script the tuner can rerun
    (``python train.py ...``); None otherwise (no command recorded, an in-process recording
    of an interactive session, a command that does not parse)."""
    text = str(meta.get("command") or "").strip()
    if not text:
        return None
    try:
        argv = shlex.split(text)
    except ValueError:
        return None
    first = Path(argv[0]).name
    if first.startswith(_LAUNCHERS) and len(argv) >= 2 and argv[1] not in ("-c", "-"):
        return tuple(argv)
    if argv[0].endswith(".py"):  # the in-process recorder records sys.argv: a script path
        return ("python", *argv)
    return None


def batch_option(argv: tuple[str, ...], batch: int) -> str:
    """The batch-size option of ``argv`` whose value is ``batch`` (``--bs 32``,
    ``--batch-size=32``: a name with ``batch`` in it, or ``--bs``/``-b``);
    :data:`DEFAULT_OPTION` when none is (the tuner then adds it)."""
    wanted = str(batch)
    for i, arg in enumerate(argv):
        name, sep, value = arg.partition("=")
        if not name.startswith("-") or not _batchish(name):
            continue
        if (sep and value == wanted) or (not sep and argv[i + 1 : i + 2] == (wanted,)):
            return name
    return DEFAULT_OPTION


def _batchish(name: str) -> bool:
    low = name.lower().lstrip("-")
    return "batch" in low or low in ("bs", "b")


def device_arg(meta: dict[str, Any], cwd: str) -> str:
    """The device for ``--device``: the preset's name, or the spec file's absolute path."""
    origin = str(meta.get("device_origin") or "")
    if origin.startswith("preset ") or not origin:
        return str(meta.get("device") or "ascend910b")
    path = Path(origin)
    return str(path if path.is_absolute() else Path(cwd or ".") / path)


def request(
    meta: dict[str, Any], batch: int, *, max_batch: int = 256, limit: float = 0.8,
    granularity: int = 1,
) -> TuneRequest | None:  # fmt: skip
    """The tuner request for a profile recorded at ``batch``; None when its meta records no
    rerunnable application (see :func:`application`)."""
    argv = application(meta)
    if argv is None:
        return None
    cwd = str(meta.get("cwd") or "")
    return TuneRequest(
        application=argv,
        option=batch_option(argv, batch),
        device=device_arg(meta, cwd),
        cwd=cwd,
        batch=batch,
        max_batch=max_batch,
        limit=limit,
        granularity=granularity,
    )


#: what runs a request (the rule's seam: tests give a stand-in)
Tuner = Callable[[TuneRequest], TuneResult]


def run(req: TuneRequest, progress: Callable[[Trial], None] | None = None) -> TuneResult:
    """Run the tuner for ``req``: one shapes-only ``msprof`` run of the script per batch
    tried, in the folder it was recorded in (this process's when that is gone)."""
    from msprof_py.tune.script_trials import measure_script

    cwd = req.cwd if req.cwd and os.path.isdir(req.cwd) else None
    app = list(req.application)
    return search(
        lambda b: measure_script(app, req.option, b, req.device, cwd=cwd),
        min_batch=req.batch,
        max_batch=max(req.max_batch, req.batch),
        limit=req.limit,
        granularity=req.granularity,
        progress=progress,
    )


def trial_at(result: TuneResult, batch: int) -> Trial | None:
    """The tuner's successful trial at ``batch``, if it measured one."""
    for t in result.trials:
        if t.batch == batch and not t.error:
            return t
    return None
