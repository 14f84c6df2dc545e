"""Run tuner trials for a model factory, each in a fresh process (see :mod:`msprof_py.tune`)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

from msprof_py.tune.search import Trial, TuneResult, search

#: seconds one trial may take (a shapes-only step of a large model takes a few)
TRIAL_TIMEOUT_S = 600


def factory_ref(factory: Callable[[], Any] | str) -> dict[str, str]:
    """How a trial process finds ``factory``: ``"package.module:function"``, or a module-level
    function (of an importable module, or of the running script)."""
    if isinstance(factory, str):
        module, sep, name = factory.partition(":")
        if not sep or not module or not name:
            raise ValueError(f"a factory reference is 'module:function', got {factory!r}")
        return {"module": module, "name": name}
    name = getattr(factory, "__qualname__", "")
    if not name or "<" in name:
        raise ValueError(
            "the model factory must be a module-level function (each trial builds the model "
            "in a fresh process)"
        )
    module = factory.__module__
    if module == "__main__":
        path = getattr(sys.modules["__main__"], "__file__", None)
        if not path:
            raise ValueError("a factory defined interactively cannot be loaded by a trial")
        return {"file": path, "name": name}
    return {"module": module, "name": name}


def measure(spec: dict[str, Any]) -> Trial:
    """Run one trial process for ``spec`` (its ``batch`` set)."""
    cmd = [sys.executable, "-m", "msprof_py.tune.trial", json.dumps(spec)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=TRIAL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return Trial(spec["batch"], error=f"took over {TRIAL_TIMEOUT_S} s")
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    if done.returncode != 0 or not lines:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return Trial(spec["batch"], error=f"failed: {last[:200]}")
    data = json.loads(lines[-1])
    return Trial(
        spec["batch"],
        int(data.get("peak_bytes", 0)),
        int(data.get("capacity_bytes", 0)),
        int(data.get("step_ns", 0)),
        str(data.get("error", "")),
    )


def auto_batch(
    factory: Callable[[], Any] | str,
    input_shape: Sequence[int],
    *,
    input_dtype: str = "float32",
    optimizer: str = "sgd",
    amp: str = "",
    device: str = "ascend910b",
    limit: float = 0.8,
    min_batch: int = 1,
    max_batch: int = 256,
    granularity: int = 1,
    progress: Callable[[Trial], None] | None = None,
) -> TuneResult:
    """The largest batch whose training step keeps peak device memory within ``limit`` of the
    device, measured in shapes-only mode (see :mod:`msprof_py.tune`).

    ``factory`` builds the model (a module-level function, or ``"module:function"``);
    ``input_shape`` is one sample's shape (``(3, 224, 224)``, or ``(512,)`` with
    ``input_dtype="int64"`` for token ids); ``optimizer`` is ``sgd``, ``adam`` or ``adamw``
    (their states take memory); ``amp`` ``""``, ``"float16"`` or ``"bfloat16"``.
    """
    if optimizer not in ("sgd", "adam", "adamw"):
        raise ValueError(f"optimizer must be sgd, adam or adamw, got {optimizer!r}")
    if amp not in ("", "float16", "bfloat16"):
        raise ValueError(f"amp must be '', 'float16' or 'bfloat16', got {amp!r}")
    base = {
        "factory": factory_ref(factory),
        "input_shape": [int(d) for d in input_shape],
        "input_dtype": input_dtype,
        "optimizer": optimizer,
        "amp": amp,
        "device": device,
    }
    return search(
        lambda batch: measure({**base, "batch": batch}),
        min_batch=min_batch,
        max_batch=max_batch,
        limit=limit,
        granularity=granularity,
        progress=progress,
    )


__all__ = ["TuneResult", "auto_batch", "factory_ref", "measure"]
