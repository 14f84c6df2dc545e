"""``msprof compare BASE NEW``: the click command (registered by ``msprof_py.cli``).

    msprof compare runs/before runs/after                       # tables on the terminal
    msprof compare BASE NEW --json > compare.json               # stable keys
    msprof compare BASE NEW --output compare/                   # CSV per sheet (+ xlsx)
    msprof compare BASE NEW --base-step 3 --new-step 3          # one step of each
    msprof compare BASE NEW --op-name-map aten::addmm=aten::mm  # or a map file

Bad input (a missing path, no profile there, a step or rank that is not there, a bad map) is
one line on stderr and exit code 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from msprof_py.analyzers.command import warmup_option
from msprof_py.profile import ProfileError


class CompareCommandError(click.ClickException):
    """A usage or input error of ``msprof compare``: one line, exit code 2."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


def _warn(message: str) -> None:
    click.echo(f"msprof compare: warning: {message}", err=True)


@click.command("compare")
@click.argument("base", metavar="BASE", type=click.Path(path_type=Path))
@click.argument("new", metavar="NEW", type=click.Path(path_type=Path))
@click.option(
    "--base-step",
    type=int,
    default=None,
    metavar="N",
    help="Compare only step N of BASE (default: the mean over its analysed steps).",
)
@click.option(
    "--new-step",
    type=int,
    default=None,
    metavar="M",
    help="Compare only step M of NEW (default: the mean over its analysed steps).",
)
@click.option("--rank", type=int, default=None, help="Compare this rank (default: the first).")
@warmup_option
@click.option(
    "--op-name-map",
    "op_name_map",
    multiple=True,
    metavar="A=B|FILE",
    help="Match BASE op A with NEW op B (repeatable; pairs may be joined by ','; or a file: "
    "one A=B a line, or a JSON object).",
)
@click.option(
    "--top",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Rows per table on the terminal (--json and --output have all).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.option(
    "--output",
    "output_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    metavar="DIR",
    help="Write OverallMetrics.csv, OperatorCompare.csv ... into DIR, and "
    "performance_comparison_result.xlsx with the same sheets when xlsxwriter is installed.",
)
@click.option("--force", is_flag=True, help="With --output: replace files already there.")
def compare(
    base: Path,
    new: Path,
    base_step: int | None,
    new_step: int | None,
    rank: int | None,
    warmup: int | None,
    op_name_map: tuple[str, ...],
    top: int,
    as_json: bool,
    output_dir: Path | None,
    force: bool,
) -> None:
    """Compare NEW with BASE, per step, as msprof-analyze compare does: the overall split
    (compute by class, uncovered communication, free, E2E time), operators matched by name
    and input shapes with their device time and its change, modules, memory and
    communication. BASE and NEW are profiles msprof recorded (or any msprof_py.load reads).

    A side without device work (a CPU-only trace) is compared by its host op time: every
    table then says "projection (CPU host time vs NPU device time)".
    """
    from msprof_py.compare import compare as run_compare
    from msprof_py.compare.names import OpNameMapError, parse_op_name_map

    for path, what in ((base, "BASE"), (new, "NEW")):
        if not path.exists():
            raise CompareCommandError(f"{path}: no such file or directory ({what})")
    if as_json and output_dir is not None:
        raise CompareCommandError("--json and --output cannot be combined")
    try:
        name_map = parse_op_name_map(op_name_map)
        result = run_compare(
            base,
            new,
            base_step=base_step,
            new_step=new_step,
            rank=rank,
            warmup=warmup,
            op_name_map=name_map,
        )
    except (OpNameMapError, ProfileError) as exc:
        raise CompareCommandError(str(exc)) from None
    for message in result.warnings:
        _warn(message)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
        return
    if output_dir is not None:
        from msprof_py.compare.export import ExportError, has_xlsxwriter, write

        try:
            files = write(result, output_dir, force=force)
        except ExportError as exc:
            raise CompareCommandError(str(exc)) from None
        if not has_xlsxwriter():
            _warn("xlsxwriter is not installed: CSV files only (pip install xlsxwriter)")
        click.echo(f"msprof compare: wrote {len(files)} files to {output_dir} ({result.label})")
        return
    from msprof_py.compare.render import render

    render(result, top=top)
