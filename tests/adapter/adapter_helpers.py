"""Helpers for adapter tests."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run_script(code: str, timeout: int = 120) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (for settings a process can only install once)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
