"""Tuner trials of a whole training script: each batch size is one ``msprof`` run of the
script in shapes-only mode with its batch-size option set (``msprof tune-batch``)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from msprof_py.tune.search import Trial

#: seconds one run of the script may take
RUN_TIMEOUT_S = 900
#: what a script that reads a tensor value in shapes-only mode fails with
NEEDS_VALUES = "numerics='none' (shapes only)"


def _error_line(stderr: str) -> str:
    """The line that says what went wrong: the exception, else the last line."""
    lines = [x.strip() for x in stderr.strip().splitlines() if x.strip()]
    errors = [x for x in lines if "Error: " in x or x.startswith("msprof: ")]
    return (errors[0] if errors else lines[-1] if lines else "no output")[:200]


def with_batch(application: list[str], option: str, batch: int) -> list[str]:
    """``application`` with ``option`` (``--batch-size``) set to ``batch`` (replaced when the
    command line already has it, appended otherwise)."""
    out: list[str] = []
    skip = False
    for arg in application:
        if skip:
            skip = False
        elif arg == option:
            skip = True
        elif not arg.startswith(f"{option}="):
            out.append(arg)
    return [*out, option, str(batch)]


def measure_script(
    application: list[str], option: str, batch: int, device: str, cwd: str | None = None
) -> Trial:
    """Profile the script once at ``batch`` (shapes only, no report, no exports) and read the
    peak reserved device memory and the median step (the first step left out) back; ``cwd``:
    the folder the script runs in (default: this process's)."""
    import msprof_py
    from msprof_py.device.spec import DeviceSpec

    capacity = DeviceSpec.load(device).memory.usable_bytes
    with tempfile.TemporaryDirectory(prefix="msprof-tune-") as folder:
        cmd = [
            sys.executable, "-m", "msprof_py.cli_entry", f"--output={folder}",
            f"--device={device}", "--numerics=none", "--no-report", "--export=none",
            *with_batch(application, option, batch),
        ]  # fmt: skip
        try:
            done = subprocess.run(
                cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=cwd or None
            )
        except subprocess.TimeoutExpired:
            return Trial(batch, error=f"took over {RUN_TIMEOUT_S} s")
        runs = sorted(Path(folder).glob("msprof_*"))
        if not runs:
            return Trial(batch, error=f"failed: {_error_line(done.stderr)}")
        profile = msprof_py.load(runs[-1])
        memory = profile.tables["memory"]
        if (memory["action"].astype(str) == "oom").any():
            return Trial(batch, error="out of memory")
        steps = profile.steps
        # a script that reads a value (loss.item()) stops there in shapes-only mode: the steps
        # it recorded before still say what memory a step takes
        read_a_value = NEEDS_VALUES in done.stderr and len(steps) > 0
        if done.returncode != 0 and not read_a_value:
            return Trial(batch, error=f"exit code {done.returncode}: {_error_line(done.stderr)}")
        durations = (steps["end_ns"] - steps["start_ns"]).to_numpy()
        step_ns = int(sorted(durations[1:] if len(durations) > 1 else durations)[
            (max(len(durations) - 1, 1)) // 2
        ]) if len(durations) else 0  # fmt: skip
        peak = int(memory["reserved"].max()) if len(memory) else 0
        return Trial(batch, peak, capacity, step_ns)
