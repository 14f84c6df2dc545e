"""The self-contained HTML report of a stored profile (``msprof report``)."""

from __future__ import annotations

import typing as _typing

from msprof_py.lazy import lazy_getattr

if _typing.TYPE_CHECKING:
    from msprof_py.report.build import ReportError, build_html, write_report

__all__ = ["ReportError", "build_html", "write_report"]

#: imported on first use: the CLI reaches the command module without pandas
__getattr__ = lazy_getattr(__name__, globals(), dict.fromkeys(__all__, "msprof_py.report.build"))
