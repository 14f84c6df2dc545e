"""The Rich console every command prints through: the terminal's width on a terminal; in a
pipe or a CI log (where Rich would assume 80 columns, squeeze tables and wrap lines) wide
enough that nothing wraps."""

from __future__ import annotations

from rich.console import Console

#: columns when the output is no terminal (a pipe, a CI log)
LOG_WIDTH = 200


def make_console(*, stderr: bool = False) -> Console:
    """A console on stdout (``stderr``: on stderr) that never wraps a line in a log."""
    console = Console(stderr=stderr, soft_wrap=True)
    if not console.is_terminal:
        console.width = max(console.width, LOG_WIDTH)
    return console
