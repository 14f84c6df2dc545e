"""Analyzers: pure functions from a stored profile to DataFrames and findings (no torch here).

from msprof_py.analyzers import analyze
result = analyze("profile_data/msprof_20260101_120000")   # or a loaded Profile
result.step_breakdown["steps"]        # pandas DataFrames per section
for finding in result.fired():        # the rules that fired, in priority order
    print(finding.priority, finding.message, finding.estimated_gain_us)
result.to_json()                      # the documented --json document (schema.py)
"""

from __future__ import annotations

import typing as _typing

from msprof_py.lazy import lazy_getattr

if _typing.TYPE_CHECKING:
    from msprof_py.analyzers.api import Analysis, analyze
    from msprof_py.analyzers.findings import Finding

__all__ = ["Analysis", "Finding", "analyze"]

#: imported on first use: the CLI reaches the command modules without pandas
__getattr__ = lazy_getattr(
    __name__,
    globals(),
    {
        "Analysis": "msprof_py.analyzers.api",
        "analyze": "msprof_py.analyzers.api",
        "Finding": "msprof_py.analyzers.findings",
    },
)
