"""The ``msprof`` command line. Thin: parses arguments and calls library functions.

msprof --application="python train.py --lr 0.1" --output=profile_data
msprof --output=profile_data python train.py --lr 0.1
msprof devices
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import click

from msprof_py import __version__
from msprof_py.device.spec import DeviceSpec, SpecError, preset_names
from msprof_py.profile.errors import ProfileError, ProfileWarning

if TYPE_CHECKING:
    from msprof_py.exporters.window import StepWindow

_PYTHON_SHOWWARNING = warnings.showwarning
_ON_OFF = click.Choice(["on", "off"])


#: subcommand -> (module, attribute) of its click command, imported when it is invoked (or
#: listed by ``--help``): profiling an application loads none of them (nor pandas behind them)
_SUBCOMMANDS = {
    "analyze": ("msprof_py.analyzers.command", "analyze"),
    "tune-batch": ("msprof_py.tune.command", "tune_batch"),
    "report": ("msprof_py.report.command", "report"),
    "gate": ("msprof_py.gates.command", "gate"),
    "diff": ("msprof_py.gates.command", "diff"),
    "compare": ("msprof_py.compare.command", "compare"),
    "op": ("msprof_py.kernels.command", "op"),
}


class _MsprofGroup(click.Group):
    """Commands, or an application to profile given after the options (like real msprof)."""

    def resolve_command(self, ctx: click.Context, args: list[str]):  # type: ignore[override]
        if args and args[0] not in self.commands and args[0] not in _SUBCOMMANDS:
            return "_run", self.commands["_run"], args
        return super().resolve_command(ctx, args)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *_SUBCOMMANDS})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands and name in _SUBCOMMANDS:
            import importlib

            module, attribute = _SUBCOMMANDS[name]
            self.add_command(getattr(importlib.import_module(module), attribute), name)
        return super().get_command(ctx, name)

    def invoke(self, ctx: click.Context) -> object:
        with warnings.catch_warnings():
            warnings.simplefilter("default", ProfileWarning)
            warnings.showwarning = _show_profile_warning
            try:
                return super().invoke(ctx)
            except (SpecError, ProfileError) as exc:
                raise CliError(" ".join(str(exc).split())) from None


_SHOWN: set[str] = set()


def _show_profile_warning(message, category, filename, lineno, file=None, line=None):  # type: ignore[no-untyped-def]
    """Profile warnings as one line on stderr, each once (a run loads its profile for every
    output it writes); others as Python shows them."""
    if issubclass(category, ProfileWarning):
        text = " ".join(str(message).split())
        if text not in _SHOWN:
            _SHOWN.add(text)
            click.echo(f"msprof: warning: {text}", err=True)
        return
    _PYTHON_SHOWWARNING(message, category, filename, lineno, file, line)


class CliError(click.ClickException):
    """A problem with what the user asked for: one line on stderr, exit code 2."""

    exit_code = 2


def main(argv: list[str] | None = None) -> None:
    """The ``msprof`` console script: errors are one line and exit code 2, never a traceback."""
    try:
        cli.main(args=argv, prog_name="msprof", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("msprof: interrupted", err=True)
        sys.exit(130)
    except click.ClickException as exc:  # bad options and CliError alike
        click.echo(f"msprof: error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code if isinstance(exc, CliError) else 2)
    sys.exit(0)


@click.group(
    cls=_MsprofGroup,
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"], "allow_interspersed_args": False},
)
@click.option(
    "--application",
    metavar='"CMD ARGS"',
    help='The program to profile, e.g. "python train.py --lr 0.1" or "torchrun ...".',
)
@click.option(
    "--output",
    type=click.Path(file_okay=False),
    default=".",
    show_default=True,
    help="Folder for the profile; each run gets its own msprof_<time> folder in it.",
)
@click.option(
    "--iteration",
    type=click.IntRange(min=1),
    help="Record this many training steps, then stop recording (the script runs on).",
)
@click.option(
    "--warmup",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Training steps to skip before recording.",
)
@click.option(
    "--steps-from",
    default="optimizer",
    show_default=True,
    metavar="optimizer|marks|N",
    help="What ends a training step: every optimizer.step(); only the script's own marks "
    "(prof.step(), msprof_py.step()); or N: only the step() of optimizer N (0, 1 ... in the "
    "order they first step: pick one of a GAN's two optimizers).",
)
@click.option(
    "--device",
    default="ascend910b",
    show_default=True,
    help="Device preset (see `msprof devices`) or a device spec file.",
)
@click.option(
    "--numerics",
    type=click.Choice(["cpu", "none", "fast"]),
    default="cpu",
    show_default=True,
    help="cpu: compute every value (bitwise CPU); none: shapes only (models too big for host "
    "memory); fast: fp16/bf16 matmuls and convolutions computed in fp32 and rounded (AMP "
    "models run many times faster; values not bitwise CPU).",
)
@click.option(
    "--host-time",
    type=click.Choice(["modeled", "measured"]),
    default="modeled",
    show_default=True,
    help="modeled: dispatch costs from the spec (deterministic); measured: add the "
    "script's real Python time between ops.",
)
@click.option(
    "--deterministic",
    is_flag=True,
    help="Refuse anything that would make the timeline depend on wall-clock time.",
)
@click.option(
    "--task-time", type=_ON_OFF, default="on", show_default=True, help="Record device tasks."
)
@click.option(
    "--sys-hardware-mem",
    type=_ON_OFF,
    default="on",
    show_default=True,
    help="Record device memory events.",
)
@click.option(
    "--ascendcl",
    type=_ON_OFF,
    default="on",
    show_default=True,
    help="Record host runtime API calls (launches, synchronisations).",
)
@click.option(
    "--with-stack",
    is_flag=True,
    help="Record the Python call stack of every host op (for msprof analyze "
    "--folded-stacks flame graphs; costs host time per op).",
)
@click.option(
    "--type",
    "output_type",
    type=click.Choice(["text", "db"]),
    default="text",
    show_default=True,
    help="Output type (db is not supported yet).",
)
@click.option(
    "--export",
    "export",
    default="ascend,chrome",
    show_default=True,
    metavar="ascend,chrome|none",
    help="What to write next to the raw profile: ascend (the torch_npu/CANN folders "
    "msprof-analyze and MindStudio Insight read), chrome (trace.json for Perfetto), both, or "
    "none.",
)
@click.option(
    "--export-steps",
    metavar="FIRST-LAST",
    help="Export only these recorded steps (10-19, 10- or 10); the raw profile, the analysis "
    "and the report keep every step.",
)
@click.option(
    "--export-gzip",
    type=_ON_OFF,
    default="off",
    show_default=True,
    help="Write the Chrome trace gzip-compressed (trace.json.gz, which Perfetto opens).",
)
@click.option(
    "--report/--no-report",
    default=True,
    show_default=True,
    help="Write the HTML report at the end of the run.",
)
@click.version_option(__version__, prog_name="msprof")
@click.pass_context
def cli(ctx: click.Context, application: str | None, **options: object) -> None:
    """msprof-py: profile PyTorch training on a simulated Ascend-style NPU.

    Run a training script under the simulated NPU and record its op, copy, stream and memory
    timelines:

        msprof --application="python train.py" --output=profile_data

        msprof --output=profile_data python train.py --lr 0.1
    """
    ctx.obj = dict(options)
    if ctx.invoked_subcommand is not None:
        if application is not None and ctx.invoked_subcommand == "_run":
            raise click.UsageError(
                "give the application either with --application or after the options, not both"
            )
        return
    if application is None:
        given = [
            f"--{name.replace('_', '-')}"
            for name in ctx.params
            if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT
        ]
        if given:  # options for a run, but nothing to run: a usage error, not help
            raise click.UsageError(
                f"{given[0]} given but no application to profile (put it after the options: "
                "msprof --output=out python train.py)"
            )
        click.echo(ctx.get_help())
        return
    from msprof_py.collectors.launcher import split_application

    _profile(ctx.obj, split_application(application))


@cli.command(
    "_run",
    hidden=True,
    add_help_option=False,
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
)
@click.argument("application", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def _run(ctx: click.Context, application: tuple[str, ...]) -> None:
    _profile(ctx.obj, list(application))


def _profile(options: dict, application: list[str]) -> None:
    from msprof_py.collectors.launcher import LaunchError
    from msprof_py.collectors.run import ProfileRun, RunOptions

    if options["output_type"] == "db":
        raise click.UsageError("--type db is not supported yet; use --type text")
    if options["deterministic"] and options["host_time"] == "measured":
        raise click.UsageError(
            "--deterministic needs --host-time modeled (measured host time "
            "depends on the wall clock)"
        )
    DeviceSpec.load(options["device"])  # an unknown preset or bad spec fails here, clearly
    from msprof_py.collectors.stepsource import parse_steps_from

    try:
        steps_from = parse_steps_from(str(options["steps_from"]))
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    export, export_steps = _export_choice(str(options["export"]), options["export_steps"])
    run_options = RunOptions(
        output=Path(str(options["output"])),
        device=str(options["device"]),
        numerics=str(options["numerics"]),
        host_time=str(options["host_time"]),
        warmup=int(options["warmup"]),  # type: ignore[arg-type]
        iteration=options["iteration"],  # type: ignore[arg-type]
        steps_from=steps_from,
        deterministic=bool(options["deterministic"]),
        task_time=options["task_time"] == "on",
        sys_hardware_mem=options["sys_hardware_mem"] == "on",
        ascendcl=options["ascendcl"] == "on",
        with_stack=bool(options["with_stack"]),
        report=bool(options["report"]),
        export=export,
        export_steps=export_steps,
        export_gzip=options["export_gzip"] == "on",
    )
    try:
        run = ProfileRun(run_options, application)
        code = run.execute()
    except LaunchError as exc:
        raise CliError(str(exc)) from None
    run.print_summary()
    if run.window_error:
        raise CliError(run.window_error)
    sys.exit(code)


EXPORTS = ("ascend", "chrome")


def _export_choice(text: str, steps: object) -> tuple[tuple[str, ...], StepWindow | None]:
    """``--export=ascend,chrome|none`` and ``--export-steps`` as run options."""
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    if names == ["none"]:
        chosen: tuple[str, ...] = ()
    elif not names or any(n not in EXPORTS for n in names):
        raise click.UsageError(f"--export {text}: give ascend, chrome, ascend,chrome or none")
    else:
        chosen = tuple(n for n in EXPORTS if n in names)
    if steps is None:
        return chosen, None
    from msprof_py.exporters.window import StepWindow  # pyarrow behind it: only when asked

    try:
        return chosen, StepWindow.parse(str(steps))
    except ValueError as exc:
        raise click.UsageError(f"--export-{exc}") from None


@cli.command()
@click.option(
    "--spec",
    "spec_file",
    type=click.Path(dir_okay=False),
    help="Validate a device spec file and show its figures instead of the presets.",
)
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def devices(spec_file: str | None, as_json: bool) -> None:
    """List the device presets with their key figures."""
    specs = (
        [DeviceSpec.from_file(spec_file)]
        if spec_file
        else [DeviceSpec.preset(name) for name in preset_names()]
    )
    table = {spec.name: {"description": spec.description, **spec.key_figures()} for spec in specs}
    if as_json:
        click.echo(json.dumps(table, indent=2))
        return
    from rich.table import Table

    from msprof_py.console import make_console
    from msprof_py.safe_text import cell

    out = Table(title="Simulated NPU presets" if not spec_file else f"Device spec {spec_file}")
    out.add_column("", style="bold", no_wrap=True)
    for name in table:
        out.add_column(name, overflow="fold")
    figures = [key for key in next(iter(table.values())) if key != "description"]
    for key in figures:
        out.add_row(key, *(cell(entry[key]) for entry in table.values()))
    make_console().print(out)
