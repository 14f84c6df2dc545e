"""The pytest plugin: the npu_profile fixture, the npu_budget marker, --npu-profile-dir, xdist.

Each pytester run is a fresh pytest process (the npu device is per process), so several test
functions share one run.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

import msprof_py
from msprof_py.gates.figures import figures
from msprof_py.pytest_plugin import Budget, parse_budget

pytest_plugins = ["pytester"]

#: the code under test, importable in the pytester runs and run in this process as well
WORKLOAD = textwrap.dedent(
    """
    import torch


    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(64, 128)
            self.b = torch.nn.Linear(128, 10)

        def forward(self, x):
            return self.b(torch.relu(self.a(x)))


    def train(steps=4):
        torch.manual_seed(0)
        model = Net().to("npu")
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        x = torch.randn(32, 64).to("npu")
        y = torch.randint(0, 10, (32,)).to("npu")
        for _ in range(steps):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            loss.item()
    """
)

TESTS = textwrap.dedent(
    """
    import json
    from pathlib import Path

    import pytest
    import torch

    from workload import train


    @pytest.mark.npu_budget(step_time_ms=0.001, max_launches_per_step=1, peak_memory_mb=1e6)
    def test_over_budget(npu_profile):
        with npu_profile:
            train()


    @pytest.mark.npu_budget(max_step_time_ms=100, launches_per_step=1000, min_utilization=0.01)
    def test_within_budget_and_deterministic(npu_profile):
        with npu_profile:
            train()
        first = npu_profile.figures.to_dict()
        junk = [torch.randn(n, 33).to("npu") @ torch.randn(33, 5).to("npu") for n in (7, 999)]
        del junk
        with npu_profile.record():
            train()
        assert npu_profile.figures.to_dict() == first
        assert npu_profile.checks(step_time_ms=100)[0].passed
        Path("figures.json").write_text(json.dumps(first))


    @pytest.mark.npu_budget(max_step_time=1.0)
    def test_unknown_budget(npu_profile):
        pass


    @pytest.mark.npu_budget(min_utilization=0.999)
    def test_whole_body_recorded_without_the_fixture():
        train()


    @pytest.mark.npu_budget(step_time_ms=1.0)
    def test_records_nothing(npu_profile):
        pass


    @pytest.mark.npu_budget(step_time_ms=0.001, max_syncs_per_step=1)
    class TestClassBudget:
        @pytest.mark.npu_budget(max_step_time_ms=100)
        def test_closest_marker_wins(self, npu_profile):
            with npu_profile:
                train(steps=2)
            assert npu_profile.figures.syncs_per_step == 1  # loss.item()
    """
)


def _write(pytester: pytest.Pytester, tests: str) -> None:
    pytester.makepyfile(workload=WORKLOAD, test_budget=tests)


@pytest.fixture
def figures_here() -> dict[str, object]:
    """The figures of :data:`WORKLOAD` recorded in this process, where much ran before (set up
    before ``pytester``, whose teardown forgets the modules imported after it started)."""
    namespace: dict[str, object] = {}
    exec(compile(WORKLOAD, "workload", "exec"), namespace)
    with msprof_py.record() as rec:
        namespace["train"]()  # type: ignore[operator]
    return figures(rec.analyze()).to_dict()


def test_budgets_fail_readably_and_failing_profiles_are_kept(
    figures_here: dict[str, object], pytester: pytest.Pytester
) -> None:
    _write(pytester, TESTS)
    result = pytester.runpytest_subprocess("--npu-profile-dir", "kept", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=3, errors=1)
    out = result.stdout.str()
    # one line per exceeded metric, the ones within the budget unnamed
    result.stdout.fnmatch_lines(
        [
            "*_ test_over_budget _*",
            "npu_budget exceeded: step_time_ms = * ms > limit 0.001 ms",
            "npu_budget exceeded: launches_per_step = * > limit 1",
            "  (3 analysed step(s), first 1 left out as warm-up; device ascend910b, *modeled)",
            "profile kept in */kept/test_budget.py__test_over_budget",
        ]
    )
    assert "exceeded: peak_memory_mb" not in out
    result.stdout.fnmatch_lines(
        [
            "*ERROR at setup of test_unknown_budget*",
            "npu_budget: unknown budget 'max_step_time' (did you mean 'max_step_time_ms'?)*",
        ]
    )
    result.stdout.fnmatch_lines(["npu_budget exceeded: min_utilization = * < limit 0.999"])
    result.stdout.fnmatch_lines(["npu_budget: the test recorded nothing*`with npu_profile:`"])
    result.stdout.fnmatch_lines(["npu profiles of 2 failing test(s) kept:"])

    kept = pytester.path / "kept"
    assert sorted(p.name for p in kept.iterdir()) == [
        "test_budget.py__test_over_budget",
        "test_budget.py__test_whole_body_recorded_without_the_fixture",
    ]
    folder = kept / "test_budget.py__test_over_budget"
    assert "npu_budget exceeded: step_time_ms" in (folder / "failure.txt").read_text()
    (run,) = [p for p in folder.iterdir() if p.is_dir()]
    profile = msprof_py.load(run)
    assert profile.meta[0]["command"] == "test_budget.py::test_over_budget"
    assert figures(msprof_py.analyze(profile)).step_time_ms > 0.001

    # the same code gives the same figures in this process (where much ran before) as in the
    # fresh pytest process, where it gave the same figures twice
    there = json.loads((pytester.path / "figures.json").read_text())
    here = dict(figures_here)
    there.pop("command", None), here.pop("command", None)  # which test ran it, not a figure
    assert there == here


XDIST_TESTS = textwrap.dedent(
    """
    import pytest

    from workload import train


    @pytest.mark.npu_budget(max_launches_per_step=1)
    def test_over(npu_profile):
        with npu_profile:
            train(steps=2)


    @pytest.mark.npu_budget(max_launches_per_step=1000)
    def test_within(npu_profile):
        with npu_profile:
            train(steps=2)
    """
)


@pytest.mark.slow  # two pytest workers, each recording (the plugin's other tests run by default)
def test_under_xdist_each_worker_keeps_its_own_profiles(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    _write(pytester, XDIST_TESTS)
    result = pytester.runpytest_subprocess(
        "-n", "2", "--npu-profile-dir", "kept", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["*npu_budget exceeded: launches_per_step = * > limit 1*", "*test_budget.py__test_over"]
    )
    (folder,) = (pytester.path / "kept").iterdir()
    (run,) = [p for p in folder.iterdir() if p.is_dir()]
    assert msprof_py.load(run).meta[0]["command"] == "test_budget.py::test_over"


def test_budget_names_map_to_the_gate_limits() -> None:
    assert parse_budget(
        {
            "step_time_ms": 12.5,
            "max_launches_per_step": 300,
            "peak_memory_mb": 512,
            "min_utilization": 0.5,
            "op_type_time_ms": {"MatMulV2": 1},
        }
    ) == Budget(
        {
            "step_time_ms": 12.5,
            "launches_per_step": 300.0,
            "peak_memory_mb": 512.0,
            "min_utilization": 0.5,
        },
        {"MatMulV2": 1.0},
    )
    with pytest.raises(ValueError, match=r"unknown budget 'max_utilization'"):
        parse_budget({"max_utilization": 0.5})  # a floor has no max_ form
    with pytest.raises(ValueError, match="both set the budget 'step_time_ms'"):
        parse_budget({"step_time_ms": 1, "max_step_time_ms": 2})
    with pytest.raises(ValueError, match="step_time_ms must be a number, got True"):
        parse_budget({"step_time_ms": True})
    with pytest.raises(ValueError, match="must map op types to ms"):
        parse_budget({"op_type_time_ms": 3})


def test_the_plugin_module_loads_without_torch() -> None:
    import subprocess
    import sys

    code = "import sys, msprof_py.pytest_plugin; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_failure_folders_are_named_by_node_id(tmp_path: Path) -> None:
    from msprof_py.pytest_plugin import _safe_name

    assert _safe_name("tests/a_test.py::TestX::test_y[npu-2]") == (
        "tests_a_test.py__TestX__test_y_npu-2"
    )
    long = _safe_name("t.py::test_" + "x" * 300)
    assert len(long) <= 120
