"""Exporters: Ascend-compatible profile folders and Chrome/Perfetto traces, from stored profiles."""

from __future__ import annotations

from pathlib import Path


def export_run(run_dir: Path) -> None:
    """Write every export of one rank's run folder (placeholder until the exporters land)."""
