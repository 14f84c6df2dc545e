"""``msprof analyze DIR``: the click command (registered by ``msprof_py.cli``).

    msprof analyze profile_data/msprof_20260101_120000            # terminal summary
    msprof analyze DIR --top 20 --rank 1                          # rank 1's details
    msprof analyze DIR --json > analysis.json                     # schema: analyzers/schema.py
    msprof analyze DIR --csv analysis/                            # one CSV per table
    msprof analyze DIR --folded-stacks out.folded                 # flame graph input
    msprof analyze DIR --tune-batch                               # batch finding: measured

Bad input (a missing folder, a folder without a profile, an unknown rank) is one line on
stderr and exit code 2.
"""

from __future__ import annotations

from pathlib import Path

import click

from msprof_py.profile import ProfileError


class AnalyzeError(click.ClickException):
    """A problem with what the user asked for: one line, exit code 2."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))  # always one line


#: ``--warmup N``, shared by the commands that analyse a profile
warmup_option = click.option(
    "--warmup",
    type=click.IntRange(min=0),
    default=None,
    help="Leave out this many first training steps (default: 1 when there are 2 or more).",
)


@click.command("analyze")
@click.argument("directory", metavar="DIR", type=click.Path(path_type=Path))
@click.option(
    "--top", type=click.IntRange(min=1), default=10, show_default=True, help="Rows per top-N table."
)
@click.option(
    "--rank", type=int, default=None, help="Analyse this rank (default: all, details of the first)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the analysis as JSON (stable schema).")
@click.option(
    "--csv",
    "csv_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    metavar="OUTDIR",
    help="Write every table as CSV into OUTDIR (refuses to replace CSV files without --force).",
)
@click.option("--force", is_flag=True, help="With --csv: replace CSV files already in OUTDIR.")
@click.option(
    "--folded-stacks",
    "folded",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="FILE",
    help="Also write the device time per Python call stack (msprof --with-stack; else per "
    "module path) in the folded format flamegraph.pl and Speedscope read.",
)
@warmup_option
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    default=None,
    help="The batch size, for the batch-size extrapolation (default: inferred).",
)
@click.option(
    "--keep-outliers",
    is_flag=True,
    help="Keep outlier steps (more than 3x the median step) in the per-step figures.",
)
@click.option(
    "--tune-batch",
    is_flag=True,
    help="For the batch-size finding, run the auto batch tuner (msprof tune-batch) on the "
    "recorded script: one shapes-only run per batch tried (slow).",
)
def analyze(
    directory: Path,
    top: int,
    rank: int | None,
    as_json: bool,
    csv_dir: Path | None,
    force: bool,
    folded: Path | None,
    warmup: int | None,
    batch_size: int | None,
    keep_outliers: bool,
    tune_batch: bool,
) -> None:
    """Analyse the profile in DIR: headline numbers, tables and findings in priority order."""
    from msprof_py.analyzers.api import analyze as run_analysis

    if as_json and csv_dir is not None:
        raise AnalyzeError("--json and --csv cannot be combined")
    if not directory.exists():
        raise AnalyzeError(f"{directory}: no such file or directory")
    if csv_dir is not None and not force and csv_dir.is_dir() and any(csv_dir.glob("*.csv")):
        raise AnalyzeError(f"{csv_dir}: already holds CSV files (--force replaces them)")
    try:
        result = run_analysis(
            directory,
            rank=rank,
            top=top,
            warmup=warmup,
            batch_size=batch_size,
            keep_outliers=keep_outliers,
            tuner=_run_tuner if tune_batch else None,
        )
    except ProfileError as exc:
        raise AnalyzeError(str(exc)) from None
    if folded is not None:
        _write_folded(result, folded)
    if as_json:
        from msprof_py.analyzers.schema import dumps

        click.echo(dumps(result))
        return
    if csv_dir is not None:
        from msprof_py.analyzers.schema import write_csv

        try:
            files = write_csv(result, csv_dir)
        except OSError as exc:
            raise AnalyzeError(f"{csv_dir}: cannot write ({exc.strerror or exc})") from None
        click.echo(f"msprof analyze: wrote {len(files)} CSV files to {csv_dir}")
        return
    from msprof_py.analyzers.render import render

    render(result, top=top)


def _run_tuner(req: object) -> object:
    """``--tune-batch``: run the tuner for the batch-size finding, its trials on stderr."""
    from msprof_py.analyzers import batchtune
    from msprof_py.tune.command import print_trial

    assert isinstance(req, batchtune.TuneRequest)
    click.echo(f"msprof analyze: tuning the batch: {req.command()}", err=True)
    return batchtune.run(req, progress=print_trial)


def _write_folded(result: object, path: Path) -> None:
    """``--folded-stacks FILE``: write it and say so on stderr (stdout may be the JSON)."""
    from msprof_py.analyzers.flame import STACKS, write_folded

    try:
        lines, source = write_folded(result, path)  # type: ignore[arg-type]
    except OSError as exc:
        raise AnalyzeError(f"{path}: cannot write ({exc.strerror or exc})") from None
    how = (
        "frames: the recorded Python stacks"
        if source == STACKS
        else "no Python stacks recorded (msprof --with-stack): frames are module paths"
    )
    click.echo(f"msprof analyze: wrote {lines} folded stacks to {path} ({how})", err=True)
