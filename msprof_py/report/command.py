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
    help="HTML file to write (default: <run folder>/report.html, next to an imported trace "
    "file, or report-1.html next to an existing one). An existing file is refused unless "
    "--force.",
)
@click.option("--force", is_flag=True, help="Replace the -o file if it exists.")
@click.option(
    "--mkdir",
    "make_dirs",
    is_flag=True,
    help="Create the -o file's folder if it does not exist.",
)
def report(path: Path, out_file: Path | None, force: bool, make_dirs: bool) -> None:
    """Write a self-contained HTML report of the profile at PATH."""
    from msprof_py.profile import ProfileError
    from msprof_py.report.build import ReportError, write_report

    if out_file is not None:
        _check_target(out_file, force, make_dirs)
    try:
        if out_file is not None and out_file.exists():  # --force: replace it whole, atomically
            written = _replace(path, out_file, write_report)
        else:
            written = write_report(path, out_file)
    except (ProfileError, ReportError, OSError) as exc:
        raise ReportCommandError(" ".join(str(exc).split()) or type(exc).__name__) from None
    click.echo(f"report: {written}")


def _check_target(out_file: Path, force: bool, make_dirs: bool) -> None:
    """An explicit ``-o``: never silently beside an existing file, never into a folder that
    does not exist unless asked."""
    if out_file.exists() and not force:
        raise ReportCommandError(f"{out_file} already exists (--force replaces it)")
    parent = out_file.parent
    if not parent.exists():
        if not make_dirs:
            raise ReportCommandError(f"the folder {parent} does not exist (--mkdir creates it)")
        try:
            parent.mkdir(parents=True)
        except OSError as exc:
            raise ReportCommandError(f"cannot create {parent}: {exc.strerror or exc}") from None
    elif not parent.is_dir():
        raise ReportCommandError(f"{parent} is not a folder")


def _replace(path: Path, out_file: Path, write_report: object) -> Path:
    """Write the report under a temporary name next to ``out_file``, then move it over."""
    import os

    tmp = out_file.with_name(f".{out_file.name}.{os.getpid()}.new.html")
    written = write_report(path, tmp)  # type: ignore[operator]
    try:
        os.replace(written, out_file)
    except OSError:
        Path(written).unlink(missing_ok=True)
        raise
    return out_file
