"""The self-contained HTML report of a stored profile (``msprof report``)."""

from msprof_py.report.build import ReportError, build_html, write_report

__all__ = ["ReportError", "build_html", "write_report"]
