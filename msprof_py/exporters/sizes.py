"""How big an export came out, and what to say when a viewer cannot open it.

Trace viewers load a JSON trace whole: chrome://tracing gives up at a few hundred MB, the
Perfetto UI slows to a crawl past about 500 MiB (gzip saves disk, not the viewer's memory).
:func:`size_warning` says so for a file over :data:`VIEWER_LIMIT_BYTES`, with the
``--export-steps`` window that would fit.
"""

from __future__ import annotations

import struct
from pathlib import Path

from msprof_py.units import human_bytes

#: about what a trace viewer opens well (uncompressed JSON)
VIEWER_LIMIT_BYTES = 500 * 1024 * 1024


def json_size(path: Path) -> int:
    """The uncompressed size of a JSON trace (``.gz``: from its gzip trailer, which holds the
    size modulo 4 GiB, so never less than the compressed size)."""
    size = path.stat().st_size
    if path.suffix != ".gz" or size < 4:
        return size
    with open(path, "rb") as f:
        f.seek(-4, 2)
        (isize,) = struct.unpack("<I", f.read(4))
    return max(size, isize)


def size_warning(
    path: Path,
    steps: list[int],
    limit: int = VIEWER_LIMIT_BYTES,
    leave_out: str = "",
) -> str | None:
    """A one-line warning when the trace at ``path`` (covering ``steps``) exceeds ``limit``:
    its size, and a step window (``--export-steps``) that would fit; None when it fits."""
    size = json_size(path)
    if size <= limit:
        return None
    text = f"{path.name} is {human_bytes(size)}"
    if steps:
        first = min(steps)
        keep = max(1, int(len(steps) * limit / size))
        text += (
            f" ({len(steps):,} steps), more than a trace viewer opens well (about "
            f"{human_bytes(limit)}): --export-steps={first}-{first + keep - 1} ({keep:,} "
            f"steps) comes to about that"
        )
    else:
        text += f", more than a trace viewer opens well (about {human_bytes(limit)})"
    if leave_out:
        text += f"; {leave_out} leaves it out"
    return text
