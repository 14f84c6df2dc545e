"""pytest plugin: performance budgets for code running on the simulated npu device.

Registered through the ``pytest11`` entry point (disable with ``-p no:msprof_py``)::

    def test_train_step(npu_profile):
        model = Net().to("npu")
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with npu_profile:                       # records this block, host time modelled
            for _ in range(4):
                train_step(model, opt)          # steps: optimizer.step() or msprof_py.step()
        assert npu_profile.figures.launches_per_step < 300

    @pytest.mark.npu_budget(step_time_ms=12.5, peak_memory_mb=512, max_launches_per_step=300)
    def test_within_budget(npu_profile):
        ...

* ``npu_profile`` (fixture): ``with npu_profile:`` (or ``with npu_profile.record(warmup=N):``)
  records the block in this process (:func:`msprof_py.record`, device settled first, no
  Ascend exports); afterwards ``.figures`` (:class:`~msprof_py.gates.figures.GateFigures`),
  ``.analysis``, ``.profile``, ``.path``, ``.checks(**budget)`` and
  ``.assert_within(**budget)`` read the last recording.
* ``@pytest.mark.npu_budget(**budget)``: after the test body passed, every recording of the test
  is checked; each exceeded metric fails the test with a line such as
  ``npu_budget exceeded: step_time_ms = 13.1 ms > limit 12.5 ms``. A marked test that does not
  request ``npu_profile`` has its whole body recorded. Budget names: the keys of
  :data:`msprof_py.gates.check.LIMITS` (``step_time_ms``, ``peak_memory_mb``,
  ``launches_per_step``, ``min_utilization`` ...), the ceilings also as ``max_<key>``, and
  ``op_type_time_ms={"MatMulV2": 1.0}``.
* ``--npu-profile-dir DIR`` (ini ``npu_profile_dir``): keep the profiles of failing tests in
  ``DIR/<test node id>/<run folder>`` (with the failure in ``failure.txt``); without it profiles
  live in a temporary folder removed after each test. Under pytest-xdist every worker writes
  its own folders (one per test; run folders are named by process id and time).
* ``--npu-device NAME`` and ``--npu-numerics cpu|none``: how the npu device is installed when
  the test process has not installed it yet (default ``ascend910b``, ``cpu``).

Figures are per analysed step: the first step (parameter uploads, allocator growth) is left out
when there are at least two, as ``msprof analyze`` does; record two or more steps, or choose
with ``npu_profile.record(warmup=N)``. Host time is always modelled, so the figures are exact
and the same on every machine.

This module is imported by every pytest run of an environment that has msprof-py installed:
it imports torch and the collectors only when a test uses the fixture.
"""

from __future__ import annotations

import difflib
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from hashlib import sha1
from numbers import Real
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from msprof_py.analyzers import Analysis
    from msprof_py.collectors.inprocess import Recording
    from msprof_py.gates.check import Check
    from msprof_py.gates.figures import GateFigures
    from msprof_py.profile import Profile

MARKER = "npu_budget"
FIXTURE = "npu_profile"
#: the op-type-valued budget key
OP_TYPE_KEY = "op_type_time_ms"
#: user property naming a kept profile (reaches the xdist controller with the report)
KEPT_PROPERTY = "npu_profile_kept"

_reports_key = pytest.StashKey[dict[str, pytest.TestReport]]()
_budget_key = pytest.StashKey["Budget"]()
_auto_key = pytest.StashKey[bool]()


# ---- budgets ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Budget:
    """Absolute limits (keys of ``LIMITS``) and per-op-type device-time limits."""

    limits: dict[str, float] = field(default_factory=dict)
    op_types: dict[str, float] = field(default_factory=dict)


def budget_names() -> dict[str, str]:
    """Accepted budget argument -> budget key: every ``LIMITS`` key, and ``max_<key>`` for
    the ceilings (``max_launches_per_step`` -> ``launches_per_step``)."""
    from msprof_py.gates.check import LIMITS

    names = {key: key for key in LIMITS}
    names.update({f"max_{key}": key for key, limit in LIMITS.items() if limit.ceiling})
    names[OP_TYPE_KEY] = OP_TYPE_KEY
    names[f"max_{OP_TYPE_KEY}"] = OP_TYPE_KEY
    return names


def _number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ValueError(f"{name} must be a number, got {value!r}")
    return float(value)


def parse_budget(kwargs: Mapping[str, object]) -> Budget:
    """The budget of ``npu_budget(**kwargs)``; raises ValueError naming what is wrong."""
    names = budget_names()
    limits: dict[str, float] = {}
    op_types: dict[str, float] = {}
    given: dict[str, str] = {}
    for name, value in kwargs.items():
        key = names.get(name)
        if key is None:
            close = difflib.get_close_matches(name, list(names), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            known = ", ".join(key for key in names if not key.startswith("max_"))
            raise ValueError(
                f"unknown budget {name!r}{hint}; known: {known} (ceilings also as max_<name>)"
            )
        if key in given:
            raise ValueError(f"{name!r} and {given[key]!r} both set the budget {key!r}")
        given[key] = name
        if key == OP_TYPE_KEY:
            if not isinstance(value, Mapping) or not value:
                raise ValueError(f'{name} must map op types to ms, e.g. {{"MatMulV2": 1.0}}')
            op_types = {str(t): _number(f"{name}[{t!r}]", v) for t, v in value.items()}
        else:
            limits[key] = _number(name, value)
    return Budget(limits, op_types)


def _item_budget(item: pytest.Item) -> Budget | None:
    """The merged ``npu_budget`` markers of ``item`` (the closest marker wins per key)."""
    markers = list(item.iter_markers(MARKER))
    if not markers:
        return None
    merged: dict[str, object] = {}
    for marker in reversed(markers):  # farthest (module, class) first
        if marker.args:
            raise ValueError(f"takes keyword arguments only (got {marker.args!r})")
        parse_budget(marker.kwargs)  # each marker on its own is valid
        names = budget_names()
        for name, value in marker.kwargs.items():
            key = names[name]
            for other in [n for n in merged if names[n] == key]:
                del merged[other]
            merged[name] = value
    return parse_budget(merged)


# ---- the fixture object -------------------------------------------------------------------


class NpuProfile:
    """What ``npu_profile`` gives a test: ``with npu_profile:`` records, then the figures."""

    def __init__(
        self,
        nodeid: str,
        output: Path,
        device: str | None = None,
        numerics: str | None = None,
    ) -> None:
        self.nodeid = nodeid
        self.output = output
        self.device = device
        self.numerics = numerics
        #: every recording of the test, in order; the properties read the last one
        self.recordings: list[Recording] = []
        self._warmups: list[int | None] = []
        self._open: list[AbstractContextManager[NpuProfile]] = []

    # ---- recording ----------------------------------------------------------------------

    @contextmanager
    def record(self, warmup: int | None = None) -> Iterator[NpuProfile]:
        """Record the block. ``warmup``: analysed figures leave out this many first steps
        (default: 1 when there are at least 2)."""
        from msprof_py.collectors.inprocess import record

        recording = record(
            self.output,
            device=self.device,
            numerics=self.numerics,
            host_time="modeled",
            command=self.nodeid,
        )
        self.recordings.append(recording)
        self._warmups.append(warmup)
        with recording:
            yield self

    def __enter__(self) -> NpuProfile:
        block = self.record()
        block.__enter__()
        self._open.append(block)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._open.pop().__exit__(*exc)

    # ---- results (of the last recording) ------------------------------------------------

    def _last(self) -> tuple[Recording, int | None]:
        if not self.recordings:
            raise RuntimeError(
                f"{FIXTURE}: nothing recorded yet; run the code to measure inside `with {FIXTURE}:`"
            )
        return self.recordings[-1], self._warmups[-1]

    @property
    def path(self) -> Path | None:
        """The run folder of the last recording (None while recording or if it was empty)."""
        return self._last()[0].run_dir

    @property
    def profile(self) -> Profile:
        """The stored profile of the last recording."""
        return self._last()[0].load()

    @property
    def analysis(self) -> Analysis:
        """:func:`msprof_py.analyze` of the last recording."""
        recording, warmup = self._last()
        return recording.analyze(warmup=warmup)

    @property
    def figures(self) -> GateFigures:
        """The gate figures (per analysed step) of the last recording."""
        from msprof_py.gates.figures import figures

        return figures(self.analysis)

    def checks(self, **budget: object) -> list[Check]:
        """Every budget metric checked against the last recording (budget names as for
        ``npu_budget``)."""
        from msprof_py.gates.check import check_absolute

        parsed = parse_budget(budget)
        return check_absolute(self.figures, parsed.limits, parsed.op_types)

    def assert_within(self, **budget: object) -> None:
        """Raise AssertionError naming every exceeded metric."""
        failed = [c for c in self.checks(**budget) if not c.passed]
        if failed:
            raise AssertionError("\n".join(_exceeded_line(c) for c in failed))

    def __repr__(self) -> str:
        return f"<NpuProfile {self.nodeid} recordings={len(self.recordings)}>"


def _exceeded_line(check: Check) -> str:
    return f"{MARKER} exceeded: {check.describe()}"


def _window(analysis: Analysis) -> str:
    info = analysis.profile
    steps = info.get("steps_analysed") or []
    skipped = info.get("warmup_skipped") or []
    if steps == [-1]:
        text = "whole recording as one step (no step marks)"
    else:
        text = f"{len(steps)} analysed step(s)"
        if skipped:
            text += f", first {len(skipped)} left out as warm-up"
    return f"{text}; device {info.get('device')}, host time {info.get('host_time')}"


def _budget_failures(prof: NpuProfile, budget: Budget, kept_in: Path | None) -> str | None:
    """The failure message of ``budget`` over every recording of the test (None: within)."""
    from msprof_py.gates.check import check_absolute
    from msprof_py.gates.figures import figures

    if not prof.recordings:
        return (
            f"{MARKER}: the test recorded nothing; run the code to measure inside `with {FIXTURE}:`"
        )
    lines: list[str] = []
    many = len(prof.recordings) > 1
    for number, (recording, warmup) in enumerate(
        zip(prof.recordings, prof._warmups, strict=True), 1
    ):
        where = f" (recording {number} of {len(prof.recordings)})" if many else ""
        if recording.run_dir is None:
            lines.append(f"{MARKER}: nothing was recorded{where}: no npu work ran in the block")
            continue
        analysis = recording.analyze(warmup=warmup)
        failed = [
            c
            for c in check_absolute(figures(analysis), budget.limits, budget.op_types)
            if not c.passed
        ]
        if failed:
            lines += [_exceeded_line(c) + where for c in failed]
            lines.append(f"  ({_window(analysis)})")
    if not lines:
        return None
    if kept_in is not None:
        lines.append(f"profile kept in {kept_in}")
    else:
        lines.append("profile discarded (--npu-profile-dir DIR keeps those of failing tests)")
    return "\n".join(lines)


# ---- hooks --------------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("msprof-py", "msprof-py: performance budgets on the simulated npu")
    group.addoption(
        "--npu-profile-dir",
        metavar="DIR",
        default=None,
        help="keep the npu profiles of failing tests in DIR/<test node id>/",
    )
    group.addoption(
        "--npu-device",
        metavar="NAME",
        default=None,
        help="device preset or spec file for the npu device (default: ascend910b)",
    )
    group.addoption(
        "--npu-numerics",
        choices=("cpu", "none", "fast"),
        default=None,
        help="npu numerics: cpu (real values, default), none (shapes only) or fast (fp16/bf16 "
        "matmuls and convolutions widened to fp32)",
    )
    parser.addini("npu_profile_dir", "keep the npu profiles of failing tests here", default="")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(**budget): fail the test when the npu code it records exceeds the budget "
        "(step_time_ms, peak_memory_mb, max_launches_per_step, min_utilization, ...; "
        "see msprof_py.pytest_plugin)",
    )


def _profile_dir(config: pytest.Config) -> Path | None:
    value = config.getoption("--npu-profile-dir") or config.getini("npu_profile_dir")
    if not value:
        return None
    path = Path(value)
    return path if path.is_absolute() else Path(config.invocation_params.dir) / path


def pytest_report_header(config: pytest.Config) -> str | None:
    folder = _profile_dir(config)
    return f"msprof-py: npu profiles of failing tests kept in {folder}" if folder else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if isinstance(item, pytest.Function) and item.get_closest_marker(MARKER) is not None:
            auto = FIXTURE not in item.fixturenames
            item.stash[_auto_key] = auto
            if auto:  # record the whole test body
                item.fixturenames.append(FIXTURE)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    try:
        budget = _item_budget(item)
    except ValueError as exc:
        error = f"{MARKER}: {exc}"
    else:
        error = ""
    if error:
        pytest.fail(error, pytrace=False)
    if budget is not None:
        item.stash[_budget_key] = budget


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    budget = item.stash.get(_budget_key, None)
    prof = getattr(item, "funcargs", {}).get(FIXTURE)
    if budget is None or not isinstance(prof, NpuProfile):
        return (yield)
    if item.stash.get(_auto_key, False):
        with prof:
            result = yield
    else:
        result = yield
    folder = _profile_dir(item.config)
    kept_in = _kept_folder(folder, item.nodeid) if folder is not None else None
    message = _budget_failures(prof, budget, kept_in)
    if message is not None:
        pytest.fail(message, pytrace=False)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    item.stash.setdefault(_reports_key, {})[report.when] = report
    return report


def _safe_name(nodeid: str) -> str:
    """A folder name for a test node id (readable, unique, not too long)."""
    name = re.sub(r"[^A-Za-z0-9_.\-]+", "_", nodeid.replace("::", "__")).strip("._")
    if len(name) > 120:
        name = f"{name[:100]}_{sha1(nodeid.encode()).hexdigest()[:12]}"
    return name or "test"


def _kept_folder(root: Path, nodeid: str) -> Path:
    return root / _safe_name(nodeid)


def _keep(prof: NpuProfile, root: Path, item: pytest.Item) -> Path | None:
    runs = [r.run_dir for r in prof.recordings if r.run_dir is not None and r.run_dir.exists()]
    if not runs:
        return None
    dest = _kept_folder(root, item.nodeid)
    dest.mkdir(parents=True, exist_ok=True)
    for run in runs:
        target = dest / run.name
        if not target.exists():  # run folders are named by pid and time: never overwritten
            shutil.move(str(run), str(target))
    reports = item.stash.get(_reports_key, {})
    text = "\n\n".join(
        f"[{when}]\n{rep.longreprtext}" for when, rep in reports.items() if rep.failed
    )
    (dest / "failure.txt").write_text(f"{item.nodeid}\n\n{text}\n", encoding="utf-8")
    return dest


@pytest.fixture
def npu_profile(request: pytest.FixtureRequest) -> Iterator[NpuProfile]:
    """Records npu code of the test (``with npu_profile:``), deterministic host time; the
    figures, analysis and profile of the recording; profiles of failing tests kept with
    ``--npu-profile-dir``."""
    config = request.config
    output = Path(tempfile.mkdtemp(prefix="npu_profile_"))
    prof = NpuProfile(
        request.node.nodeid,
        output,
        device=config.getoption("--npu-device"),
        numerics=config.getoption("--npu-numerics"),
    )
    try:
        yield prof
    finally:
        while prof._open:  # a block left open (start without stop): close it
            prof.__exit__(None, None, None)
        reports = request.node.stash.get(_reports_key, {})
        root = _profile_dir(config)
        if root is not None and any(rep.failed for rep in reports.values()):
            kept = _keep(prof, root, request.node)
            if kept is not None:
                request.node.user_properties.append((KEPT_PROPERTY, str(kept)))
        shutil.rmtree(output, ignore_errors=True)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    kept = sorted(
        {
            value
            for reports in terminalreporter.stats.values()
            for rep in reports
            for name, value in getattr(rep, "user_properties", ())
            if name == KEPT_PROPERTY
        }
    )
    if kept:
        terminalreporter.section("msprof-py")
        terminalreporter.write_line(f"npu profiles of {len(kept)} failing test(s) kept:")
        for folder in kept:
            terminalreporter.write_line(f"  {folder}")


__all__ = ["Budget", "NpuProfile", "budget_names", "npu_profile", "parse_budget"]
