"""Writing parts off the recording thread: one worker thread, jobs in order, bounded.

Encoding a chunk of rows as Parquet (dictionary pages, compression, checksums) and syncing it
to disk cost about a third of what recording a small op costs; pyarrow does it without the GIL,
so the profiled program runs on meanwhile. Jobs run one at a time in the order given (parts are
listed in the order they were taken); at most :data:`MAX_PENDING` wait, so memory stays bounded
(a program that records faster than the disk takes waits for it). The first job that fails
keeps its error for the owner, and the jobs after it are dropped: the owner stops recording
when it sees the error (``RawWriter``), as it would have for a write of its own.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable

__all__ = ["MAX_PENDING", "PartQueue"]

#: jobs that may wait behind the one being done (each holds one chunk of rows)
MAX_PENDING = 2


class PartQueue:
    """Runs jobs on a worker thread, in order; :meth:`drain` waits until all are done.

    The thread starts with the queue, before the program's own threads come and go: a thread
    started later would take the stack (and the ident) of one that ended, and the recorder's
    logical thread numbers, given by ident, would then tell two of the program's threads apart
    that they told as one before. It belongs to the process that started it: after a ``fork``
    the child's queue runs jobs in the caller's thread (its copy has no worker)."""

    def __init__(self, name: str = "msprof-writer") -> None:
        self._jobs: queue.Queue[Callable[[], None]] = queue.Queue(maxsize=MAX_PENDING)
        self._owner = os.getpid()
        #: the first job's error (None while every job succeeded)
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` after those submitted before (waits while :data:`MAX_PENDING` wait)."""
        if self.error is not None:
            return
        # a forked child has no worker of its own; at shutdown the worker may have ended
        if os.getpid() != self._owner or not self._thread.is_alive():
            self._run(job)
        else:
            self._jobs.put(job)

    def drain(self) -> None:
        """Wait until every submitted job is done (or dropped after an error)."""
        if os.getpid() == self._owner:
            self._jobs.join()

    def _run(self, job: Callable[[], None]) -> None:
        if self.error is not None:
            return
        try:
            job()
        except BaseException as exc:  # kept for the owner, who stops recording
            self.error = exc

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                self._run(job)
            finally:
                self._jobs.task_done()
