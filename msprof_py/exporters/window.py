"""The steps an export covers (``msprof --export-steps=10-19``), independent of recording.

A profile records every step of its window (``--warmup``/``--iteration``); its exports may
cover fewer: :func:`select_steps` narrows a profile to the rows of the chosen steps, so a
2,000-step run can be recorded whole and exported around the steps worth opening in a viewer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from msprof_py.exporters.errors import ExportError
from msprof_py.profile.schema import GRAPH_TABLES

if TYPE_CHECKING:
    from msprof_py.profile import Profile

_WINDOW = re.compile(r"^\s*(\d+)\s*(?:(-)\s*(\d*)\s*)?$")


@dataclass(frozen=True)
class StepWindow:
    """Steps ``first`` to ``last`` (inclusive; ``last`` None: to the end)."""

    first: int
    last: int | None = None

    @classmethod
    def parse(cls, text: str) -> StepWindow:
        """``"10-19"``, ``"10-"`` (10 to the end) or ``"10"`` (step 10 alone)."""
        match = _WINDOW.match(text)
        if match is None:
            raise ValueError(f"steps {text!r}: give FIRST-LAST, FIRST- or one step (e.g. 10-19)")
        first = int(match.group(1))
        if match.group(2) is None:
            return cls(first, first)
        last = int(match.group(3)) if match.group(3) else None
        if last is not None and last < first:
            raise ValueError(f"steps {text!r}: the last step comes before the first")
        return cls(first, last)

    def __str__(self) -> str:
        if self.last == self.first:
            return str(self.first)
        return f"{self.first}-{'' if self.last is None else self.last}"

    def contains(self, step: int) -> bool:
        return step >= self.first and (self.last is None or step <= self.last)


def select_steps(profile: Profile, window: StepWindow | None) -> Profile:
    """``profile`` with only the rows of the steps in ``window`` (all of it for None).

    Raises :class:`ExportError` when the window holds none of the profile's steps."""
    from msprof_py.profile import Profile  # not at module level: the CLI imports no pandas

    if window is None:
        return profile
    steps = profile.steps["step"]
    if not steps.map(window.contains).any():
        have = f"{steps.min()}..{steps.max()}" if len(steps) else "none"
        raise ExportError(
            f"--export-steps {window} holds none of the recorded steps (recorded: {have})"
        )
    tables = {}
    for name, df in profile.tables.items():
        if name in GRAPH_TABLES:  # plans describe the graphs the kept steps launch: all kept
            tables[name] = df
            continue
        step = df["step"]
        keep = step >= window.first
        if window.last is not None:
            keep &= step <= window.last
        tables[name] = df[keep].reset_index(drop=True)
    return Profile(profile.path, profile.meta, tables, list(profile.warnings), profile.partial)
