"""The writer thread of a raw profile: jobs in order, bounded, the first error kept."""

from __future__ import annotations

import os
import threading

import pytest

from msprof_py.profile.part_queue import MAX_PENDING, PartQueue


def test_jobs_run_in_order_on_the_writer_thread_and_drain_waits_for_them() -> None:
    queue = PartQueue()
    done: list[tuple[int, str]] = []
    gate = threading.Event()
    queue.submit(gate.wait)  # the first job holds the thread until the rest are queued
    for i in range(MAX_PENDING):
        queue.submit(lambda i=i: done.append((i, threading.current_thread().name)))
    assert done == []  # nothing ran in the caller
    gate.set()
    queue.drain()
    assert done == [(i, "msprof-writer") for i in range(MAX_PENDING)]
    assert queue.error is None


def test_a_full_queue_makes_the_caller_wait() -> None:
    queue = PartQueue()
    gate = threading.Event()
    queue.submit(gate.wait)  # running
    for _ in range(MAX_PENDING):
        queue.submit(lambda: None)  # waiting: the queue is full now
    submitted = threading.Event()

    def one_more() -> None:
        queue.submit(lambda: None)
        submitted.set()

    caller = threading.Thread(target=one_more)
    caller.start()
    assert not submitted.wait(0.3)  # bounded: the caller waits for room
    gate.set()
    assert submitted.wait(10)
    caller.join()
    queue.drain()


def test_the_first_error_is_kept_and_later_jobs_are_dropped() -> None:
    queue = PartQueue()
    ran: list[int] = []

    def fail() -> None:
        raise OSError(28, "No space left on device")

    queue.submit(lambda: ran.append(1))
    queue.submit(fail)
    queue.submit(lambda: ran.append(3))
    queue.drain()
    assert ran == [1]
    assert isinstance(queue.error, OSError) and queue.error.errno == 28
    queue.submit(lambda: ran.append(4))  # after an error: dropped, never raises
    queue.drain()
    assert ran == [1]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_runs_jobs_itself() -> None:
    queue = PartQueue()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child has no writer thread: the job runs in the caller, at once
        try:
            queue.submit(lambda: os.write(write, threading.current_thread().name.encode()))
            queue.drain()
        finally:
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert os.read(read, 100) == b"MainThread"
    os.close(read)
