"""Sizes for people, shared by every output (no dependency on any layer)."""

from __future__ import annotations

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def human_bytes(n: float) -> str:
    """``512 B``, ``1.5 KiB``, ``1,024.0 MiB``... (binary units, one decimal)."""
    value, unit = float(n), 0
    while abs(value) >= 1024 and unit < len(_UNITS) - 1:
        value /= 1024
        unit += 1
    return f"{int(value):,} B" if unit == 0 else f"{value:,.1f} {_UNITS[unit]}"
