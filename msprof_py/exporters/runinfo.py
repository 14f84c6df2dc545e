"""What every exporter needs to know about one rank's run, derived from its stored metadata.

The profile keeps times as integer nanoseconds from the simulated device's origin. Ascend files
carry wall-clock microseconds, so exporters add a fixed base: the run's ``start_time`` from
``meta.json`` read as UTC (the stored value has no zone; reading it as UTC keeps every export a
pure function of the profile, independent of the machine that exports it). Absolute timestamps
are written as exact decimal text (``"1764491125917002.120"``: microseconds with 3 decimals, the
way torch_npu writes them), never through a float, which cannot hold 19 significant digits.
"""

from __future__ import annotations

import calendar
import datetime as dt
import hashlib
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from msprof_py.exporters.errors import ExportError
from msprof_py.exporters.trace_events import series, us_text
from msprof_py.profile import Profile

#: Model ID of tasks that belong to no graph model (eager execution): UINT32_MAX, as CANN writes
NO_MODEL_ID = 4294967295
#: device_id that msprof's pid encoding reserves for host-side processes
HOST_DEVICE_ID = 31


def _parse_time(value: Any) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return dt.datetime.fromisoformat(value)
    except ValueError:
        return None


def _epoch_ns(moment: dt.datetime) -> int:
    """ns since the epoch; a time without zone is read as UTC (see module docs)."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return calendar.timegm(moment.timetuple()) * 1_000_000_000 + moment.microsecond * 1000


#: the wall-clock origin of ``--deterministic`` runs' timestamps
DETERMINISTIC_START = dt.datetime(2000, 1, 1)
#: ``--deterministic`` runs export the logical process id ``DETERMINISTIC_PID + rank`` (not the
#: OS pid, different in every run), so their traces are byte-identical from run to run
DETERMINISTIC_PID = 1


@dataclass(frozen=True)
class RunInfo:
    """Identity and time base of one rank's run (everything derived from its ``meta``)."""

    rank: int
    world_size: int
    pid: int
    hostname: str
    device_id: int
    #: wall-clock ns (since the epoch, UTC) of device time 0
    base_ns: int
    start: dt.datetime
    end: dt.datetime
    run_dir: str
    meta: dict[str, Any]

    @classmethod
    def from_profile(cls, profile: Profile) -> RunInfo:
        """The run info of a single-rank profile."""
        if len(profile.ranks) != 1:
            raise ExportError(f"expected a profile of one rank, got ranks {profile.ranks}")
        rank = profile.ranks[0]
        meta = profile.meta[rank]
        start = _parse_time(meta.get("start_time")) or dt.datetime(1970, 1, 1)
        end = _parse_time(meta.get("end_time")) or start
        pid = int(meta.get("pid", 0) or 0)
        if meta.get("deterministic"):  # nothing exported may depend on when or as what it ran
            start = end = DETERMINISTIC_START
            pid = DETERMINISTIC_PID + int(rank)
        env = meta.get("env") or {}
        try:
            device_id = int(env.get("LOCAL_RANK", rank))
        except (TypeError, ValueError):
            device_id = int(rank)
        return cls(
            rank=int(rank),
            world_size=int(meta.get("world_size", 1) or 1),
            pid=pid,
            hostname=str(meta.get("hostname", "localhost")),
            device_id=device_id % HOST_DEVICE_ID,  # 5 bits in the pid encoding, 31 = host
            base_ns=_epoch_ns(start),
            start=start,
            end=end,
            run_dir=str(meta.get("run_dir", "")),
            meta=meta,
        )

    # ---- names ---------------------------------------------------------------------------

    @property
    def multi_rank(self) -> bool:
        """True for a rank of a distributed run (several ranks in the world)."""
        return self.world_size > 1

    @property
    def stamp17(self) -> str:
        """``YYYYmmddHHMMSSfff`` of the start (the timestamp in ``PROF_*`` names)."""
        return self.start.strftime("%Y%m%d%H%M%S%f")[:-3]

    @property
    def stamp14(self) -> str:
        """``YYYYmmddHHMMSS`` of the end (the timestamp in ``mindstudio_profiler_output``)."""
        return self.end.strftime("%Y%m%d%H%M%S")

    @property
    def prof_dir_name(self) -> str:
        """``PROF_{6 digits}_{17-digit ts}_{id}``; the id is derived from the run, not random."""
        digest = hashlib.sha1(f"{self.run_dir}:{self.rank}".encode()).digest()
        letters = "".join(chr(ord("A") + b % 26) for b in digest[:8])
        return f"PROF_{1:06d}_{self.stamp17}_{self.pid % 10**8:08d}{letters}"

    def format_pid(self, sort_index: int, device_id: int | None = None) -> int:
        """msprof's process id encoding ``(pid << 10) | (sort_index << 5) | device_id``."""
        dev = self.device_id if device_id is None else device_id
        return (self.pid << 10) | (sort_index << 5) | dev

    # ---- times ---------------------------------------------------------------------------

    def ts_text(self, ns: np.ndarray) -> pa.Array:
        """Absolute wall-clock microseconds with 3 decimals, as exact text (Arrow strings),
        for profile ns."""
        return us_text(np.asarray(ns, dtype=np.int64) + np.int64(self.base_ns))

    def ts_series(self, ns: np.ndarray) -> pd.Series:
        """:meth:`ts_text` as a pandas Series (for table columns)."""
        return series(self.ts_text(ns))

    def ts1(self, ns: int) -> str:
        """One absolute timestamp as text (see :meth:`ts_text`)."""
        return self.ts_text(np.array([ns]))[0].as_py()


def us(ns: np.ndarray | float | int) -> np.ndarray:
    """Nanoseconds as float microseconds (durations: exact to the ns below 2**53 ns)."""
    return np.asarray(ns, dtype=np.float64) / 1000.0


_KEY_FIGURE_AI_CPU = re.compile(r"(\d+)\s*AI CPU")


def ai_cpu_cores(meta: dict[str, Any]) -> int | None:
    """AI CPU core count from the recorded key figures (``"24 AIC + 48 AIV, 6 AI CPU"``)."""
    cores = (meta.get("key_figures") or {}).get("cores", "")
    match = _KEY_FIGURE_AI_CPU.search(str(cores))
    return int(match.group(1)) if match else None
