"""``msprof op``: profile the DSL kernel launches of a Python script (as CANN's msprof op).

msprof op --output=opprof --kernel-name=add_custom --launch-count=2 python run_add.py
"""

from __future__ import annotations

import click


class OpCliError(click.ClickException):
    """A bad ``msprof op`` request: one line on stderr, exit code 2."""

    exit_code = 2


@click.command(
    "op",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option(
    "--output",
    type=click.Path(file_okay=False),
    default=".",
    show_default=True,
    help="Folder for the results; each run gets its own OPPROF_<time>_<pid> folder in it.",
)
@click.option(
    "--kernel-name",
    metavar="NAME",
    help="Profile only launches of this kernel (shell wildcards allowed: 'flash*').",
)
@click.option(
    "--launch-count",
    type=click.IntRange(1, 100),
    default=1,
    show_default=True,
    help="Profile at most this many launches (later ones only run).",
)
@click.argument("application", nargs=-1, type=click.UNPROCESSED)
def op(
    output: str, kernel_name: str | None, launch_count: int, application: tuple[str, ...]
) -> None:
    """Profile kernel launches: PipeUtilization.csv, trace.json (Perfetto), roofline, findings.

    msprof op --output=opprof python run_kernel.py
    """
    from msprof_py.kernels.opprof import OpProfError
    from msprof_py.kernels.oprun import run_folder, run_script

    try:
        prof = run_script(list(application), kernel_name=kernel_name, launch_count=launch_count)
    except OpProfError as exc:
        raise OpCliError(str(exc)) from None
    folder = prof.write(run_folder(output))
    click.echo(prof.summary())
    more = len(prof.launched) - len(prof.profiles)
    tail = f" ({more} more launch{'es' * (more > 1)} not profiled)" if more > 0 else ""
    click.echo(f"msprof op: {len(prof.profiles)} launch(es) profiled{tail}; results in {folder}")
