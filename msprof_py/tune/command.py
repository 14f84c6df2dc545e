"""``msprof tune-batch``: the largest batch of a training script that fits (click command,
registered by ``msprof_py.cli``).

    msprof tune-batch python train.py --steps 3                  # sets --batch-size N
    msprof tune-batch --batch-arg=--bs --limit 0.8 --max-batch 256 python train.py
    msprof tune-batch --application="python train.py --steps 3"    # as msprof takes it
"""

from __future__ import annotations

import shlex

import click

from msprof_py.tune.search import Trial, TuneResult, search


class TuneError(click.ClickException):
    """A usage problem of ``msprof tune-batch``: one line, exit code 2."""

    exit_code = 2


def print_trial(trial: Trial) -> None:
    """One trial's line, on stderr (progress)."""
    if trial.error:
        click.echo(f"  batch {trial.batch:>5}: {trial.error}", err=True)
        return
    click.echo(
        f"  batch {trial.batch:>5}: peak {trial.peak_bytes / 2**30:,.2f} GiB "
        f"({trial.share:.1%} of the device), step {trial.step_ns / 1e6:,.3f} ms, "
        f"{trial.samples_per_s:,.0f} samples/s",
        err=True,
    )


def print_result(result: TuneResult) -> None:
    """The trials as a table and the conclusion, on stdout."""
    click.echo(f"{'batch':>6}  {'peak GiB':>9}  {'of device':>9}  {'step ms':>10}  samples/s")
    for row in result.table():
        if row["error"]:
            click.echo(f"{row['batch']:>6}  {row['error']}")
            continue
        click.echo(
            f"{row['batch']:>6}  {row['peak_gib']:>9,.2f}  {row['share']:>9.1%}  "
            f"{row['step_ms']:>10,.3f}  {row['samples_per_s']:,.0f}"
        )
    if not result.best:
        click.echo(f"no batch size keeps peak memory within {result.limit:.0%} of the device")
        return
    why = " (the cap)" if result.capped else ""
    click.echo(f"largest batch within {result.limit:.0%} of device memory: {result.best}{why}")


@click.command(
    "tune-batch",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option("--batch-arg", default="--batch-size", show_default=True,
              help="The script's option that sets the batch size.")  # fmt: skip
@click.option("--device", default="ascend910b", show_default=True,
              help="Device preset or spec file.")  # fmt: skip
@click.option("--limit", type=click.FloatRange(0, 1, min_open=True), default=0.8,
              show_default=True, help="Share of device memory the peak may reach.")  # fmt: skip
@click.option("--min-batch", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--max-batch", type=click.IntRange(min=1), default=256, show_default=True,
              help="Never propose more (the seed's tuner caps at 256).")  # fmt: skip
@click.option("--granularity", type=click.IntRange(min=1), default=1, show_default=True,
              help="Stop bisecting at an interval this narrow.")  # fmt: skip
@click.option("--application", "application_line", default=None, metavar="COMMAND",
              help="The script as one string, instead of after the options.")  # fmt: skip
@click.argument("application", nargs=-1, type=click.UNPROCESSED)
def tune_batch(
    application_line: str | None,
    batch_arg: str,
    device: str,
    limit: float,
    min_batch: int,
    max_batch: int,
    granularity: int,
    application: tuple[str, ...],
) -> None:
    """Find the largest batch whose training step keeps peak device memory within --limit of
    the device: the script runs under msprof in shapes-only mode once per batch size tried
    (doubling, then bisecting), with BATCH_ARG set. Keep its step count small (--steps 3)."""
    from msprof_py.device.spec import DeviceSpec, SpecError
    from msprof_py.tune.script_trials import measure_script

    if max_batch < min_batch:
        raise TuneError(f"--max-batch {max_batch} is below --min-batch {min_batch}")
    try:
        DeviceSpec.load(device)
    except (SpecError, OSError, ValueError) as exc:
        raise TuneError(" ".join(str(exc).split())) from None
    if application_line is not None and application:
        raise TuneError("give the application either with --application or after the options")
    if application_line is not None:
        try:
            app = shlex.split(application_line)
        except ValueError as exc:
            raise TuneError(f"cannot parse --application: {exc}") from None
    else:
        app = list(application)
    if not app:
        raise TuneError('no application given (use --application="python train.py")')
    click.echo(f"msprof tune-batch: {' '.join(app)} ({batch_arg} N, {device})", err=True)
    result = search(
        lambda batch: measure_script(app, batch_arg, batch, device),
        min_batch=min_batch,
        max_batch=max_batch,
        limit=limit,
        granularity=granularity,
        progress=print_trial,
    )
    print_result(result)
