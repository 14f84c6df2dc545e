"""Errors raised by the simulated device."""

from __future__ import annotations


class DeviceError(RuntimeError):
    """Misuse of the simulated device (bad stream, unrecorded event, invalid copy ...)."""


class EventNotReadyError(DeviceError):
    """An event's result was asked for before the device reached it (like cudaErrorNotReady)."""
