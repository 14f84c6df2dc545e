"""Budget files (parsing, errors with key and line) and the checks they make (hand-made
figures, known answers)."""

from __future__ import annotations

import pytest

from msprof_py.gates.budget import BudgetError, init_budget, parse_budget
from msprof_py.gates.check import check_absolute, check_relative, parse_growth

ISSUE_EXAMPLE = """\
[absolute]
step_time_ms = 12.5        # mean step time
peak_memory_mb = 2048
copy_ratio = 0.10          # copy time / step time
min_utilization = 0.60     # device busy time / step time
launches_per_step = 400
syncs_per_step = 2
[absolute.op_type_time_ms] # device time per step of an op type
MatMul = 3.0
[relative]                 # against --baseline; growth allowed
step_time = "2%"
peak_memory = "5%"
"""


def error(text: str) -> BudgetError:
    with pytest.raises(BudgetError) as info:
        parse_budget(text, "perf-budget.toml")
    return info.value


def test_the_example_of_the_issue_parses() -> None:
    budget = parse_budget(ISSUE_EXAMPLE)
    assert budget.absolute == {
        "step_time_ms": 12.5,
        "peak_memory_mb": 2048.0,
        "copy_ratio": 0.10,
        "min_utilization": 0.60,
        "launches_per_step": 400.0,
        "syncs_per_step": 2.0,
    }
    assert budget.op_type_time_ms == {"MatMul": 3.0}
    assert budget.relative == {"step_time": 0.02, "peak_memory": 0.05}
    assert budget.needs_baseline


def test_bad_toml_names_the_line() -> None:
    exc = error("[absolute]\nstep_time_ms = 12.5\npeak_memory_mb = = 3\n")
    assert exc.line == 3
    assert "perf-budget.toml, line 3: not valid TOML" in str(exc)


def test_an_unknown_key_names_key_and_line_and_suggests_the_close_one() -> None:
    exc = error("[absolute]\nstep_time_ms = 12.5\n\nstep_tme_ms = 3\n")
    assert (exc.key, exc.line) == ("step_tme_ms", 4)
    assert str(exc).startswith("perf-budget.toml, line 4: unknown key 'step_tme_ms' in [absolute]")
    assert "did you mean 'step_time_ms'" in str(exc)


def test_a_relative_key_under_absolute_says_where_it_belongs() -> None:
    exc = error('[absolute]\nstep_time = "2%"\n')
    assert exc.line == 2 and "[relative]" in str(exc) and "'step_time_ms'" in str(exc)


def test_a_wrong_type_names_key_line_and_type() -> None:
    exc = error('# budget\n[absolute]\npeak_memory_mb = "2 GiB"\n')
    assert (exc.key, exc.line) == ("peak_memory_mb", 3)
    assert "[absolute] peak_memory_mb must be a number, got '2 GiB' (a string)" in str(exc)


def test_an_op_type_limit_of_the_wrong_type_is_found_in_its_table() -> None:
    exc = error(
        "[absolute]\nstep_time_ms = 1\n[absolute.op_type_time_ms]\nAdd = 1\nMatMul = true\n"
    )
    assert (exc.key, exc.line) == ("MatMul", 5)
    assert "a boolean" in str(exc)


def test_dotted_and_inline_spellings_are_found() -> None:
    exc = error("[absolute]\nop_type_time_ms.MatMul = 3\nop_type_time_ms.Add = -1\n")
    assert exc.line == 3 and ">= 0" in str(exc)
    exc = error("absolute.step_time_ms = 1\nabsolute.launches = 3\n")
    assert exc.line == 2 and "'launches_per_step'" in str(exc)


def test_a_ratio_above_one_is_refused_with_a_hint() -> None:
    exc = error("[absolute]\ncopy_ratio = 10\n")
    assert exc.line == 2 and "0.10" in str(exc)


def test_an_unknown_section_and_an_empty_budget_are_errors() -> None:
    exc = error("[absolut]\nstep_time_ms = 1\n")
    assert exc.line == 1 and "did you mean 'absolute'" in str(exc)
    assert "sets no limits" in str(error("# nothing\n"))


def test_bad_relative_amounts_name_key_and_line() -> None:
    exc = error('[relative]\nstep_time = "2%"\npeak_memory = "five%"\n')
    assert (exc.key, exc.line) == ("peak_memory", 3)
    exc = error('[relative]\nstep_time = "2"\n')
    assert exc.line == 2 and 'such as "2%"' in str(exc)
    exc = error('[relative]\nsteptime = "2%"\n')
    assert "did you mean 'step_time'" in str(exc)


def test_growth_amounts() -> None:
    assert parse_growth("2%") == pytest.approx(0.02)
    assert parse_growth(" 12.5 % ") == pytest.approx(0.125)
    assert parse_growth(0.02) == 0.02 and parse_growth(0) == 0.0
    for bad in ("2", "-1%", -0.1, True, [1]):
        with pytest.raises(ValueError):
            parse_growth(bad)


def test_absolute_checks_ceilings_and_the_utilisation_floor(make_figures) -> None:
    figs = make_figures(step_time_ms=13.0, utilization=0.55)
    budget = parse_budget(ISSUE_EXAMPLE.split("[relative]")[0])
    by_metric = {c.metric: c for c in budget.check(figs)}
    assert not by_metric["step_time_ms"].passed
    assert by_metric["step_time_ms"].describe() == "step_time_ms = 13 ms > limit 12.5 ms"
    assert not by_metric["min_utilization"].passed
    assert by_metric["min_utilization"].describe() == "min_utilization = 0.55 < limit 0.6"
    assert by_metric["op_type_time_ms.MatMul"].passed  # exactly at the limit
    assert [c.metric for c in budget.check(figs) if not c.passed] == [
        "step_time_ms",
        "min_utilization",
    ]
    # an op type the profile does not have counts as 0 ms
    assert check_absolute(figs, {}, {"Conv2D": 0.0})[0].passed


def test_relative_checks_by_hand(make_figures) -> None:
    base = make_figures()
    new = make_figures(step_time_ms=10.3, utilization=0.78, peak_memory_mb=1000.0)
    checks = {
        c.metric: c
        for c in check_relative(
            new,
            base,
            {"step_time": "2%", "utilization": "5%", "peak_memory_mb": 0},
            {"MatMul": "10%", "*": "0%"},
        )
    }
    step = checks["step_time"]
    assert step.limit == pytest.approx(10.2) and step.baseline == 10.0
    assert not step.passed and step.kind == "relative"
    assert "+3.00% vs baseline 10 ms; allowed +2.00%" in step.describe()
    util = checks["utilization"]  # a floor: may drop by 5%
    assert util.limit == pytest.approx(0.76) and util.passed
    assert checks["peak_memory_mb"].passed  # the figure name works as a key; 0 growth
    assert checks["op_type_time.MatMul"].passed and checks["op_type_time.Add"].passed


def test_relative_checks_flag_a_new_op_type_and_an_improvement_passes(make_figures) -> None:
    base = make_figures()
    new = make_figures(op_type_time_ms={"MatMul": 3.0, "Add": 1.0, "Mul": 0.01})
    checks = check_relative(new, base, {}, {"*": "50%"})
    assert [c.metric for c in checks if not c.passed] == ["op_type_time.Mul"]
    better = make_figures(step_time_ms=8.0, op_type_time_ms={"MatMul": 2.0})
    assert all(c.passed for c in check_relative(better, base, {"step_time": 0}, {"*": 0}))


def test_init_budget_writes_a_valid_budget_the_figures_pass(make_figures) -> None:
    ranks = [make_figures(), make_figures(rank=1, step_time_ms=11.0, utilization=0.7)]
    text = init_budget(ranks, headroom=0.10)
    budget = parse_budget(text)
    assert budget.absolute["step_time_ms"] == pytest.approx(12.1)  # the slowest rank + 10%
    assert budget.absolute["min_utilization"] == pytest.approx(0.63)  # the lowest - 10%
    assert budget.absolute["launches_per_step"] == 110
    assert set(budget.op_type_time_ms) == {"MatMul", "Add"}
    assert not budget.needs_baseline  # relative limits are commented out
    for figs in ranks:
        assert all(c.passed for c in budget.check(figs))


def test_the_readme_budget_example_is_valid() -> None:
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Performance gates in CI", 1)[1].split("\n## ", 1)[0]
    example = re.findall(r"```toml\n(.*?)```", section, re.S)[0]
    budget = parse_budget(example)
    assert budget.absolute["min_utilization"] == 0.6 and budget.op_type_growth == {"*": 0.1}
    assert budget.relative == {"step_time": 0.02, "peak_memory": 0.05, "utilization": 0.03}
    exc = error("[absolute]\nstep_time_ms = 1.5\nmin_utilisation = 0.6\n")
    quoted = " ".join(section.split("(`perf-budget.toml, line 3")[1].split("`)")[0].split())
    assert str(exc) == "perf-budget.toml, line 3" + quoted
