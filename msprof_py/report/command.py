"""``msprof report DIR [-o FILE]``: write the HTML report of a stored profile."""

from __future__ import annotations

from pathlib import Path

import click


class ReportCommandError(click.ClickException):
    """A report could not be written (exit status 2, one-line message)."""

    exit_code = 2


@click.command("report")
@click.argument("path", type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    "out_file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="HTML file to write (default: <run folder>/report.html; never overwritten).",
)
def report(path: Path, out_file: Path | None) -> None:
    """Write a self-contained HTML report of the profile at PATH."""
    from msprof_py.profile import ProfileError
    from msprof_py.report.build import ReportError, write_report

    try:
        written = write_report(path, out_file)
    except (ProfileError, ReportError, OSError) as exc:
        raise ReportCommandError(" ".join(str(exc).split()) or type(exc).__name__) from None
    click.echo(f"report: {written}")
