"""Which batch sizes the tuner tries, and what it concludes (no torch, no processes)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Trial:
    """One batch size measured: peak reserved device memory, the device's memory, the
    simulated step time, or why it failed (``"out of memory"`` ...)."""

    batch: int
    peak_bytes: int = 0
    capacity_bytes: int = 0
    step_ns: int = 0
    error: str = ""

    @property
    def share(self) -> float:
        """Peak reserved memory over the device's memory (1.0 when it ran out)."""
        if self.error or self.capacity_bytes <= 0:
            return 1.0
        return self.peak_bytes / self.capacity_bytes

    @property
    def samples_per_s(self) -> float:
        """Modelled throughput of the measured step."""
        return self.batch / self.step_ns * 1e9 if self.step_ns > 0 and not self.error else 0.0

    def fits(self, limit: float) -> bool:
        """The step ran and its peak stayed within ``limit`` of the device's memory."""
        return not self.error and self.share <= limit


@dataclass(slots=True)
class TuneResult:
    """Every batch tried (in the order tried) and the largest that fits (0: none did)."""

    trials: list[Trial] = field(default_factory=list)
    best: int = 0
    limit: float = 0.8
    max_batch: int = 256

    @property
    def capped(self) -> bool:
        """The answer is the cap, not the memory."""
        return self.best == self.max_batch

    def table(self) -> list[dict[str, object]]:
        """The trials sorted by batch, as rows for printing."""
        rows = []
        for t in sorted(self.trials, key=lambda t: t.batch):
            rows.append(
                {
                    "batch": t.batch,
                    "peak_gib": t.peak_bytes / 2**30,
                    "share": t.share,
                    "step_ms": t.step_ns / 1e6,
                    "samples_per_s": t.samples_per_s,
                    "fits": t.fits(self.limit),
                    "error": t.error,
                }
            )
        return rows


def search(
    measure: Callable[[int], Trial],
    *,
    min_batch: int = 1,
    max_batch: int = 256,
    limit: float = 0.8,
    granularity: int = 1,
    progress: Callable[[Trial], None] | None = None,
) -> TuneResult:
    """Double the batch from ``min_batch`` while it fits, then bisect the last interval down
    to ``granularity``; ``measure(batch)`` runs one trial."""
    if not 0 < limit <= 1:
        raise ValueError(f"the memory limit must be in (0, 1], got {limit}")
    if min_batch < 1 or max_batch < min_batch:
        raise ValueError(f"need 1 <= min_batch <= max_batch, got {min_batch} and {max_batch}")
    result = TuneResult(limit=limit, max_batch=max_batch)

    def run(batch: int) -> bool:
        trial = measure(batch)
        result.trials.append(trial)
        if progress is not None:
            progress(trial)
        return trial.fits(limit)

    good, bad = 0, 0
    batch = min_batch
    while True:
        if run(batch):
            good = batch
            if batch >= max_batch:
                break
            batch = min(batch * 2, max_batch)
        else:
            bad = batch
            break
    if bad:
        step = max(1, granularity)
        while bad - good > step:
            mid = (good + bad) // 2
            mid -= mid % step if mid - mid % step > good else 0
            if mid <= good:
                break
            if run(mid):
                good = mid
            else:
                bad = mid
    result.best = good
    return result
