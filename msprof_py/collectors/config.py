"""What a recording session records, as the launcher hands it to every process it starts.

Kept apart from :mod:`msprof_py.collectors.session` so that the launcher, which only writes the
config into the environment, starts without importing torch.
"""

from __future__ import annotations

import json
import signal
from dataclasses import asdict, dataclass, field
from typing import Any

#: environment variable through which the launcher hands the config to the bootstrap
CONFIG_ENV = "MSPROF_PY_CONFIG"
#: what a recorded process sends msprof, its parent (``SessionConfig.notify_pid``), once its
#: profile is complete and it is about to exit
PROFILE_DONE = signal.SIGUSR1

__all__ = ["CONFIG_ENV", "PROFILE_DONE", "SessionConfig"]


@dataclass
class SessionConfig:
    """What to record and where (the launcher passes it to every process as JSON)."""

    output: str = "."
    device: str = "ascend910b"
    numerics: str = "cpu"
    host_time: str = "modeled"
    warmup: int = 0
    iteration: int | None = None
    #: what ends a step: optimizer | marks | an optimizer index (Recorder's ``steps_from``)
    steps_from: str = "optimizer"
    task_time: bool = True
    sys_hardware_mem: bool = True
    ascendcl: bool = True
    deterministic: bool = False
    #: record the Python stack of every host op (``msprof --with-stack``)
    with_stack: bool = False
    command: str = ""
    #: write the Ascend exports when the session stops (off when the launcher does it)
    export: bool = True
    #: msprof's pid: the process it started (its child, not the child's children) sends it
    #: ``PROFILE_DONE`` once the profile is complete, as it exits
    notify_pid: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> SessionConfig:
        return cls(**json.loads(text))
