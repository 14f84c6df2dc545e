"""Recorded strings made safe where they leave the profile: file names and CSV cells.

Names and text in a profile come from the profiled program (op names, module paths, a host
name, annotations) and may be hostile. :func:`file_component` makes one safe file-name
component of a value; :func:`neutral_cell` makes a CSV cell that a spreadsheet will not run as a
formula (OWASP's CSV-injection guidance: a leading ``'`` before ``=``, ``+``, ``-``, ``@``, TAB
or CR), with NUL bytes dropped. The exporters and ``msprof analyze --csv`` use both.
"""

from __future__ import annotations

import re

_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]")
#: first characters a spreadsheet reads as the start of a formula
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
#: a plain number (``-1``, ``+2.5e3``) is data, not a formula: it is left as it is
PLAIN_NUMBER = r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$"
_PLAIN_NUMBER = re.compile(PLAIN_NUMBER)


def file_component(value: object) -> str:
    """``value`` as one safe file-name component: letters, digits, ``.``, ``_`` and ``-``
    only (others become ``_``), never ``.``/``..`` nor empty, at most 100 characters."""
    text = _UNSAFE_NAME.sub("_", str(value))[:100].lstrip(".")
    return text or "_"


def neutral_cell(text: str) -> str:
    """One CSV cell's text made safe for spreadsheets: NUL bytes dropped, a formula start
    (``= + - @`` TAB CR) prefixed with ``'`` unless the cell is a plain number."""
    text = text.replace("\0", "")
    if text.startswith(FORMULA_STARTS) and not _PLAIN_NUMBER.match(text):
        return "'" + text
    return text
