"""``msprof op``: profile the DSL kernel launches of a Python script (as CANN's msprof op).

msprof op --output=opprof --kernel-name=add_custom --launch-count=2 python run_add.py
msprof op simulator --output=opprof python run_add.py   # + per-unit simulator/ folders
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

    msprof op simulator [options] python run_kernel.py: also the simulator layout
    (simulator/core{i}.cubecore0 / core{i}.veccore{j}: instr_exe, code_exe, trace.json).
    """
    if application and application[0] == "simulator":
        ctx = simulator.make_context("msprof op simulator", list(application[1:]))
        with ctx:
            simulator.invoke(ctx)
        return
    _run(output, kernel_name, launch_count, application, simulator=False)


def _run(
    output: str,
    kernel_name: str | None,
    launch_count: int,
    application: tuple[str, ...],
    *,
    simulator: bool,
) -> None:
    from msprof_py.kernels.opprof import OpProfError
    from msprof_py.kernels.oprun import run_folder, run_script

    try:
        prof = run_script(list(application), kernel_name=kernel_name, launch_count=launch_count)
    except OpProfError as exc:
        raise OpCliError(str(exc)) from None
    folder = prof.write(run_folder(output), simulator=simulator)
    click.echo(prof.summary())
    more = len(prof.launched) - len(prof.profiles)
    tail = f" ({more} more launch{'es' * (more > 1)} not profiled)" if more > 0 else ""
    click.echo(f"msprof op: {len(prof.profiles)} launch(es) profiled{tail}; results in {folder}")


@click.command(
    "simulator",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option("--output", type=click.Path(file_okay=False), default=".", show_default=True,
              help="Folder for the results (an OPPROF_<time>_<pid> folder in it).")  # fmt: skip
@click.option("--kernel-name", metavar="NAME", help="Profile only launches of this kernel.")
@click.option("--launch-count", type=click.IntRange(1, 100), default=1, show_default=True,
              help="Profile at most this many launches.")  # fmt: skip
@click.argument("application", nargs=-1, type=click.UNPROCESSED)
def simulator(
    output: str, kernel_name: str | None, launch_count: int, application: tuple[str, ...]
) -> None:
    """msprof op simulator: the op profile plus simulator/ per-unit folders."""
    _run(output, kernel_name, launch_count, application, simulator=True)
