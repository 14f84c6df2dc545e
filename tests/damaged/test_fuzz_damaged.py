"""The damaged-input fuzzer: byte flips, truncation, deleted chunks, meta and schema mutations
of a real recorded profile, against ``load`` and the ``analyze``, ``report``, ``gate`` and
``diff`` commands. Invariant: a result or one clean error; never a traceback; a result that
differs from the undamaged profile's always comes with a warning.

The default run uses a fixed seed (hypothesis ``derandomize``); ``-m slow`` runs many more.
``MSPROF_FUZZ_REPORT=FILE`` writes the outcome counts of the run as JSON (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner
from fuzzing import Mutation, Tally, apply, fresh_copy, mutations
from hypothesis import HealthCheck, given, settings

from msprof_py.cli import cli
from msprof_py.profile import ProfileError, load

TALLIES: dict[str, Tally] = {}
#: meta keys whose loss changes no figure (the seal, the part listing, the row counts)
NO_FIGURE_KEYS = {"checksum", "parts", "rows"}


def _fuzz(cases: int):
    return settings(
        max_examples=cases,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


def _tally(name: str, outcome: str) -> None:
    TALLIES.setdefault(name, Tally()).add(outcome)


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    target = os.environ.get("MSPROF_FUZZ_REPORT")
    if target and TALLIES:
        old = json.loads(Path(target).read_text()) if Path(target).exists() else {}
        old.update({k: t.as_dict() for k, t in TALLIES.items()})
        Path(target).write_text(json.dumps(old, indent=2, sort_keys=True))


def _clean_error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if not line.startswith("msprof: warning:")]


def _invoke(args: list[str]):
    result = CliRunner().invoke(cli, args)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception  # a traceback: the fuzzer reports the case
    return result


def _normalised(output: str) -> dict:
    doc = json.loads(output)
    if "profile" in doc and isinstance(doc["profile"], dict):
        doc["profile"]["path"] = None
        doc["profile"]["warnings"] = None
    for key in ("profile", "baseline", "base", "new"):
        if isinstance(doc.get(key), str):
            doc[key] = None
    return doc


def check_load(run: Path, baseline) -> str:
    """One damaged profile through ``load``: the outcome (for the tally)."""
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        try:
            got = load(run)
        except ProfileError as exc:
            assert "\n" not in str(exc) and str(run) in str(exc), str(exc)
            return "clean error"
    if got.warnings:
        return "partial load" if got.partial else "result with warning"
    for name, table in baseline.tables.items():
        assert got.tables[name].equals(table), f"{name} changed without a warning"
    for rank, meta in baseline.meta.items():
        same = {k: v for k, v in meta.items() if k not in NO_FIGURE_KEYS}
        assert {k: v for k, v in got.meta[rank].items() if k not in NO_FIGURE_KEYS} == same
    return "result"


def check_command(args: list[str], codes: tuple[int, ...], expected: dict | None) -> str:
    """One command on a damaged profile: exit code allowed, an error is one line, and a
    result without a warning is the undamaged profile's (``expected``, when given)."""
    result = _invoke(args)
    assert result.exit_code in codes, (result.exit_code, result.output, result.stderr)
    if result.exit_code == 2:
        lines = _clean_error_lines(result.stderr)
        assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
        return "clean error"
    warned = "msprof: warning:" in result.stderr
    if expected is not None and not warned:
        assert _normalised(result.stdout) == expected, "changed without a warning"
    return "result with warning" if warned else "result"


@pytest.fixture(scope="module")
def expected(pristine: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Outputs of the commands on undamaged copies (at another path: paths are normalised)."""
    root = tmp_path_factory.mktemp("expected")
    a = fresh_copy(pristine["a"], root / "a")
    b = fresh_copy(pristine["b"], root / "b")
    out = {
        "load": load(a),
        "analyze": _normalised(_invoke(["analyze", str(a), "--json"]).stdout),
        "gate": _normalised(
            _invoke(["gate", str(a), "--budget", str(pristine["budget"]), "--json"]).stdout
        ),
        "diff": _normalised(_invoke(["diff", str(b), str(a), "--json"]).stdout),
    }
    # the normalisation holds: a second undamaged copy gives the same documents
    a2 = fresh_copy(pristine["a"], root / "a2")
    assert _normalised(_invoke(["analyze", str(a2), "--json"]).stdout) == out["analyze"]
    return out


def _case(tmp_path: Path, pristine: dict[str, Path], m: Mutation, name: str = "a") -> Path:
    run = fresh_copy(pristine[name], tmp_path / "case")
    apply(run, m)
    return run


def test_load_fuzzed(tmp_path: Path, pristine: dict[str, Path], expected: dict) -> None:
    @_fuzz(int(os.environ.get("MSPROF_FUZZ_LOAD", 200)))
    @given(m=mutations())
    def case(m: Mutation) -> None:
        _tally("load", check_load(_case(tmp_path, pristine, m), expected["load"]))

    case()


def test_analyze_fuzzed(tmp_path: Path, pristine: dict[str, Path], expected: dict) -> None:
    @_fuzz(int(os.environ.get("MSPROF_FUZZ_CLI", 16)))
    @given(m=mutations())
    def case(m: Mutation) -> None:
        run = _case(tmp_path, pristine, m)
        outcome = check_command(["analyze", str(run), "--json"], (0, 2), expected["analyze"])
        _tally("analyze", outcome)

    case()


def test_gate_fuzzed(tmp_path: Path, pristine: dict[str, Path], expected: dict) -> None:
    budget = str(pristine["budget"])

    @_fuzz(int(os.environ.get("MSPROF_FUZZ_CLI", 16)) // 2)
    @given(m=mutations())
    def case(m: Mutation) -> None:
        run = _case(tmp_path, pristine, m)
        args = ["gate", str(run), "--budget", budget, "--json"]
        _tally("gate", check_command(args, (0, 1, 2), expected["gate"]))

    case()


def test_gate_with_a_damaged_baseline_fuzzed(tmp_path: Path, pristine: dict[str, Path]) -> None:
    budget, good = str(pristine["budget"]), str(pristine["a"])

    @_fuzz(int(os.environ.get("MSPROF_FUZZ_CLI", 16)) * 3 // 8)
    @given(m=mutations())
    def case(m: Mutation) -> None:
        base = _case(tmp_path, pristine, m, "b")
        args = ["gate", good, "--budget", budget, "--baseline", str(base), "--json"]
        _tally("gate --baseline", check_command(args, (0, 2), None))

    case()


def test_diff_fuzzed(tmp_path: Path, pristine: dict[str, Path], expected: dict) -> None:
    base = str(pristine["b"])

    @_fuzz(int(os.environ.get("MSPROF_FUZZ_CLI", 16)) * 3 // 8)
    @given(m=mutations())
    def case(m: Mutation) -> None:
        run = _case(tmp_path, pristine, m)
        _tally("diff", check_command(["diff", base, str(run), "--json"], (0, 2), expected["diff"]))

    case()


def test_report_fuzzed(tmp_path: Path, pristine: dict[str, Path]) -> None:
    @_fuzz(int(os.environ.get("MSPROF_FUZZ_CLI", 16)) // 4)
    @given(m=mutations())
    def case(m: Mutation) -> None:
        run = _case(tmp_path, pristine, m)
        out = tmp_path / "report.html"
        out.unlink(missing_ok=True)
        _tally("report", check_command(["report", str(run), "-o", str(out)], (0, 2), None))

    case()


#: the slow runs: 1,000 cases each by default (MSPROF_FUZZ_LONG sets another count)
LONG_RUN = settings(
    max_examples=int(os.environ.get("MSPROF_FUZZ_LONG", 1000)),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.mark.slow
def test_load_fuzzed_long(tmp_path: Path, pristine: dict[str, Path], expected: dict) -> None:
    @LONG_RUN
    @given(m=mutations())
    def case(m: Mutation) -> None:
        _tally("load (long)", check_load(_case(tmp_path, pristine, m), expected["load"]))

    case()


@pytest.mark.slow
def test_analyze_fuzzed_long(tmp_path: Path, pristine: dict[str, Path], expected: dict) -> None:
    @LONG_RUN
    @given(m=mutations())
    def case(m: Mutation) -> None:
        run = _case(tmp_path, pristine, m)
        outcome = check_command(["analyze", str(run), "--json"], (0, 2), expected["analyze"])
        _tally("analyze (long)", outcome)

    case()
