"""The ``msprof`` command line. Thin: parses arguments and calls library functions."""

from __future__ import annotations

import json

import click

from msprof_py import __version__
from msprof_py.device.spec import DeviceSpec, SpecError, preset_names


class _OneLineErrors(click.Group):
    """Turn the library's expected errors into a one-line message and exit code 2."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except SpecError as exc:
            raise click.UsageError(str(exc)) from None


@click.group(cls=_OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="msprof")
def main() -> None:
    """msprof-py: profile PyTorch training on a simulated Ascend-style NPU."""


@main.command()
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
    from rich.console import Console
    from rich.table import Table

    out = Table(title="Simulated NPU presets" if not spec_file else f"Device spec {spec_file}")
    out.add_column("", style="bold", no_wrap=True)
    for name in table:
        out.add_column(name, overflow="fold")
    figures = [key for key in next(iter(table.values())) if key != "description"]
    for key in figures:
        out.add_row(key, *(entry[key] for entry in table.values()))
    Console().print(out)
