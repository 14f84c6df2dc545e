"""``msprof gate`` and ``msprof diff``: the click commands (registered by ``msprof_py.cli``).

    msprof gate RUN --budget perf-budget.toml                     # absolute limits
    msprof gate RUN --budget perf-budget.toml --baseline BASE_RUN # + relative limits
    msprof gate RUN --budget B --junit gate.xml --markdown gate.md
    msprof gate RUN --init-budget perf-budget.toml                # a first budget
    msprof gate RUN --print-figures                               # the figures a gate checks
    msprof diff BASE_RUN NEW_RUN [--json] [--force]

Exit codes of ``msprof gate``: 0 every check within budget, 1 a budget exceeded, 2 a usage or
tool error (missing folder, unloadable profile, bad budget, relative limits without a
baseline). ``msprof diff`` exits 0 (2 for errors and for profiles that are not comparable).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from msprof_py.analyzers.command import warmup_option
from msprof_py.profile import ProfileError


class GateCommandError(click.ClickException):
    """A usage or tool error of ``msprof gate``/``msprof diff``: one line, exit code 2."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


def _headroom(value: str) -> float:
    from msprof_py.gates.check import parse_growth

    try:
        return parse_growth(value if value.strip().endswith("%") else float(value))
    except ValueError:
        raise GateCommandError(
            f'--headroom: expected a percentage such as "10%" or a fraction such as 0.1, '
            f"got {value!r}"
        ) from None


def _existing(path: Path, what: str) -> None:
    if not path.exists():
        raise GateCommandError(f"{path}: no such file or directory ({what})")


def _warn(messages: list[str]) -> None:
    for message in messages:
        click.echo(f"msprof gate: warning: {message}", err=True)


@click.command("gate")
@click.argument("directory", metavar="DIR", type=click.Path(path_type=Path))
@click.option(
    "--budget",
    "budget_file",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="The budget (TOML): [absolute] limits and [relative] growth against --baseline.",
)
@click.option(
    "--baseline",
    type=click.Path(path_type=Path),
    metavar="DIR",
    help="A profile of the reference version, for the [relative] limits.",
)
@click.option(
    "--junit",
    "junit_file",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Write JUnit XML: one test case per checked metric.",
)
@click.option(
    "--markdown",
    "markdown_file",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Write a Markdown summary (also appended to $GITHUB_STEP_SUMMARY when set).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON, not a table.")
@click.option("--rank", type=int, default=None, help="Check this rank only (default: every rank).")
@warmup_option
@click.option(
    "--force",
    is_flag=True,
    help="Compare with a baseline of another device, rank set or step count anyway.",
)
@click.option(
    "--print-figures",
    is_flag=True,
    help="Print the figures a gate checks (JSON) and exit; no budget needed.",
)
@click.option(
    "--init-budget",
    "init_file",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Write a first budget from this profile's figures plus --headroom, and exit.",
)
@click.option(
    "--headroom",
    default="10%",
    show_default=True,
    help="Headroom of --init-budget limits over the current figures.",
)
def gate(
    directory: Path,
    budget_file: Path | None,
    baseline: Path | None,
    junit_file: Path | None,
    markdown_file: Path | None,
    as_json: bool,
    rank: int | None,
    warmup: int | None,
    force: bool,
    print_figures: bool,
    init_file: Path | None,
    headroom: str,
) -> None:
    """Check the profile in DIR against a performance budget.

    Exit code 0: every check within budget; 1: a budget exceeded; 2: a usage or tool error.
    Every rank of a multi-rank profile is checked. --init-budget FILE writes a first budget.
    """
    from msprof_py.gates.budget import BudgetError, init_budget, load_budget
    from msprof_py.gates.gate import GateUsageError, noisy_warning, rank_figures
    from msprof_py.gates.gate import gate as run_gate

    _existing(directory, "the profile to check")
    if print_figures or init_file is not None:
        if print_figures and init_file is not None:
            raise GateCommandError("--print-figures and --init-budget cannot be combined")
        if init_file is not None and init_file.exists():
            raise GateCommandError(f"{init_file}: exists already (never overwritten)")
        room = _headroom(headroom)
        try:
            figs, shown = rank_figures(directory, rank, warmup)
        except ProfileError as exc:
            raise GateCommandError(str(exc)) from None
        _warn(noisy_warning(figs, shown))
        if print_figures:
            click.echo(json.dumps({str(r): f.to_dict() for r, f in figs.items()}, indent=2))
            return
        assert init_file is not None
        try:
            init_file.write_text(init_budget(figs.values(), room), encoding="utf-8")
        except OSError as exc:
            raise GateCommandError(f"{init_file}: cannot write ({exc.strerror or exc})") from None
        click.echo(f"msprof gate: wrote {init_file} (limits = figures of {shown} + {room:.0%})")
        return
    if budget_file is None:
        raise GateCommandError(
            "give the budget with --budget FILE (msprof gate DIR --init-budget FILE writes a "
            "first one)"
        )
    if baseline is not None:
        _existing(baseline, "the baseline")
    try:
        budget = load_budget(budget_file)
        result = run_gate(directory, budget, baseline, rank=rank, warmup=warmup, force=force)
    except (BudgetError, GateUsageError, ProfileError) as exc:
        raise GateCommandError(str(exc)) from None
    _warn(result.warnings)
    from msprof_py.gates.output import MARKDOWN_LIMIT, gate_junit, gate_markdown, render_gate

    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        render_gate(result)
    try:
        if junit_file is not None:
            junit_file.write_text(gate_junit(result), encoding="utf-8")
        if markdown_file is not None:
            markdown_file.write_text(gate_markdown(result), encoding="utf-8")
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary:
            path = Path(summary)
            used = path.stat().st_size if path.exists() else 0
            room = MARKDOWN_LIMIT - used
            if room >= 1024:
                with path.open("a", encoding="utf-8") as out:
                    out.write(gate_markdown(result, limit=room))
            else:
                _warn([f"$GITHUB_STEP_SUMMARY ({summary}) is full (1 MiB); summary not added"])
    except OSError as exc:
        raise GateCommandError(f"cannot write the gate output: {exc}") from None
    if not result.passed:
        sys.exit(1)


@click.command("diff")
@click.argument("base", metavar="BASE", type=click.Path(path_type=Path))
@click.argument("new", metavar="NEW", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the diff as JSON.")
@click.option(
    "--force",
    is_flag=True,
    help="Compare profiles of different devices, ranks or step counts anyway.",
)
@warmup_option
@click.option(
    "--top",
    type=click.IntRange(min=1),
    default=30,
    show_default=True,
    help="Op types shown in the table (--json lists all).",
)
def diff(base: Path, new: Path, as_json: bool, force: bool, warmup: int | None, top: int) -> None:
    """Compare two profiles: step time, device time by op type, copies, utilisation, memory,
    communication; op types added, removed or changed; sorted by impact."""
    from msprof_py.gates.diff import NotComparable
    from msprof_py.gates.diff import diff as run_diff

    _existing(base, "BASE")
    _existing(new, "NEW")
    try:
        result = run_diff(base, new, force=force, warmup=warmup)
    except NotComparable as exc:
        raise GateCommandError(
            f"the profiles are not comparable: {exc} (--force compares them anyway)"
        ) from None
    except ProfileError as exc:
        raise GateCommandError(str(exc)) from None
    for w in result.warnings:
        click.echo(f"msprof diff: warning: {w}", err=True)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
        return
    from msprof_py.gates.output import render_diff

    render_diff(result, top=top)
