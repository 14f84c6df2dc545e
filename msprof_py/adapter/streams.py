"""``torch.npu.Stream`` and ``torch.npu.Event`` over the simulated device's streams and events."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from msprof_py.adapter import runtime
from msprof_py.device import engine as device_engine


class Stream(torch.Stream):
    """An npu stream: an in-order queue of device work (``torch.npu.Stream``).

    A ``torch.Stream`` (so ``Tensor.record_stream`` accepts it) whose identity is the simulated
    stream it wraps.
    """

    def __new__(
        cls, device: object = None, priority: int = 0, _stream: device_engine.Stream | None = None
    ) -> Stream:
        return super().__new__(cls, device="npu")

    def __init__(
        self, device: object = None, priority: int = 0, _stream: device_engine.Stream | None = None
    ) -> None:
        npu = runtime.state().npu
        self._stream = _stream if _stream is not None else npu.engine.create_stream(priority)
        self.priority = priority

    @property
    def stream_id(self) -> int:
        """The simulated stream's id (0 is the default stream)."""
        return self._stream.stream_id

    def wait_event(self, event: Event) -> None:
        """Make future work on this stream wait for ``event``."""
        runtime.state().npu.engine.wait_event(self._stream, event._event)

    def wait_stream(self, stream: Stream) -> None:
        """Make future work on this stream wait for all work queued on ``stream`` so far."""
        self.wait_event(stream.record_event())

    def record_event(self, event: Event | None = None) -> Event:
        """Record ``event`` (a new one if None) on this stream and return it."""
        event = event if event is not None else Event()
        event.record(self)
        return event

    def query(self) -> bool:
        """True when all work on this stream has finished (in simulated time)."""
        return runtime.state().npu.engine.query_stream(self._stream)

    def synchronize(self) -> None:
        """Block the host until all work on this stream has finished."""
        state = runtime.state()
        state.enter()
        try:
            state.npu.engine.synchronize_stream(self._stream)
        finally:
            state.leave()

    def __enter__(self) -> Stream:
        self._previous = current_stream()
        set_stream(self)
        return self

    def __exit__(self, *exc: object) -> None:
        set_stream(self._previous)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and other._stream is self._stream

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(self._stream.stream_id)

    def __repr__(self) -> str:
        return f"<torch.npu.Stream device=npu:0 stream_id={self.stream_id}>"


class Event:
    """An npu event (``torch.npu.Event``); elapsed times are simulated milliseconds."""

    def __init__(
        self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ) -> None:
        self.enable_timing = enable_timing
        self.blocking = blocking
        self._event = runtime.state().npu.engine.create_event(timing=enable_timing)

    def record(self, stream: Stream | None = None) -> None:
        """Record on ``stream`` (the current stream by default)."""
        target = stream._stream if stream is not None else runtime.state().stream
        runtime.state().npu.engine.record_event(self._event, target)

    def wait(self, stream: Stream | None = None) -> None:
        """Make ``stream`` (the current stream by default) wait for this event."""
        target = stream._stream if stream is not None else runtime.state().stream
        runtime.state().npu.engine.wait_event(target, self._event)

    def query(self) -> bool:
        """True when the work before the record has finished."""
        return runtime.state().npu.engine.query_event(self._event)

    def synchronize(self) -> None:
        """Block the host until the event has completed."""
        state = runtime.state()
        state.enter()
        try:
            state.npu.engine.synchronize_event(self._event)
        finally:
            state.leave()

    def elapsed_time(self, end_event: Event) -> float:
        """Simulated milliseconds from this event to ``end_event`` (both completed)."""
        return runtime.state().npu.engine.event_elapsed_ms(self._event, end_event._event)

    def __repr__(self) -> str:
        return f"<torch.npu.Event {self._event.event_id}>"


_WRAPPERS: dict[int, Stream] = {}


def _wrap(stream: device_engine.Stream) -> Stream:
    found = _WRAPPERS.get(stream.stream_id)
    if found is None or found._stream is not stream:
        found = _WRAPPERS[stream.stream_id] = Stream(_stream=stream)
    return found


def current_stream(device: object = None) -> Stream:
    """The stream ops are queued on."""
    return _wrap(runtime.state().stream)


def default_stream(device: object = None) -> Stream:
    """The device's default stream."""
    return _wrap(runtime.state().npu.engine.default_stream)


def set_stream(stream: Stream) -> None:
    """Queue future ops on ``stream``."""
    runtime.state().stream = stream._stream
    _WRAPPERS.setdefault(stream.stream_id, stream)


@contextmanager
def stream(s: Stream | None) -> Iterator[Stream | None]:
    """``with torch.npu.stream(s):`` queue the ops inside on ``s`` (None: no change)."""
    if s is None:
        yield None
        return
    previous = current_stream()
    set_stream(s)
    try:
        yield s
    finally:
        set_stream(previous)
