"""A tiling sweep: launch a kernel for each candidate tile size and report the fastest.

    def build(tile):                      # -> (kernel, block_dim, args)
        return add_custom, 8, (x, y, z, tile)

    sweep = tiling_sweep(build, [256, 512, 1024, 2048, 4096])
    print(sweep.table())
    sweep.best.tile, sweep.best.duration_us

A candidate whose launch fails (a buffer overflow for a tile too big, a misaligned length) is
kept as a row with its one-line error and never chosen.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from msprof_py.kernels.errors import KernelError
from msprof_py.kernels.findings import mean_ratios
from msprof_py.kernels.launch import launch
from msprof_py.kernels.results import LaunchResult

Build = Callable[[Any], tuple[Callable[..., Any], int, Sequence[Any]]]


@dataclass(frozen=True)
class SweepRow:
    """One candidate: its tile, duration and pipe shares, or the error it raised."""

    tile: Any
    block_dim: int
    duration_us: float | None
    cycles: int | None
    ratios: dict[str, float]
    error: str = ""


@dataclass(frozen=True)
class SweepResult:
    """Every candidate's row; ``best`` is the fastest that ran."""

    rows: list[SweepRow]

    @property
    def best(self) -> SweepRow:
        """The fastest candidate (raises if none ran)."""
        ok = [r for r in self.rows if r.error == ""]
        if not ok:
            raise KernelError("tiling sweep: every candidate failed")
        return min(ok, key=lambda r: (r.duration_us, str(r.tile)))

    def table(self) -> str:
        """A text table, the best candidate marked with ``*``."""
        best = self.best if any(r.error == "" for r in self.rows) else None
        head = f"{'tile':>12} {'blocks':>6} {'time(us)':>10} {'MTE2':>5} {'V':>5} {'M':>5}  note"
        lines = [head]
        for r in self.rows:
            mark = " *" if r is best else ""
            if r.error:
                lines.append(f"{r.tile!s:>12} {r.block_dim:>6} {'-':>10} {'':>5} {'':>5} "
                             f"{'':>5}  {r.error}")  # fmt: skip
                continue
            lines.append(
                f"{r.tile!s:>12} {r.block_dim:>6} {r.duration_us:>10.3f} "
                f"{r.ratios['MTE2']:>5.0%} {r.ratios['V']:>5.0%} {r.ratios['M']:>5.0%}{mark}"
            )
        return "\n".join(lines)


def tiling_sweep(build: Build, tiles: Iterable[Any], *, chip: Any = None) -> SweepResult:
    """Launch ``build(tile)`` for every tile (see module docstring)."""
    rows: list[SweepRow] = []
    for tile in tiles:
        kernel, block_dim, args = build(tile)
        try:
            result: LaunchResult = launch(kernel, block_dim, *args, chip=chip)
        except KernelError as exc:
            rows.append(SweepRow(tile, block_dim, None, None, {}, " ".join(str(exc).split())))
            continue
        rows.append(
            SweepRow(tile, block_dim, result.duration_us, result.total_cycles, mean_ratios(result))
        )
    return SweepResult(rows)
