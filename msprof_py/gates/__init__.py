"""CI performance gates: the figures a gate checks, budgets, ``msprof gate``/``msprof diff``.

from msprof_py.gates import gate, diff
result = gate("profile_data/msprof_...", "perf-budget.toml", baseline="baseline_run")
result.passed, [c.describe() for c in result.failures]
diff("base_run", "new_run").figure("step_time_ms").delta
"""

from msprof_py.gates.budget import Budget, BudgetError, init_budget, load_budget, parse_budget
from msprof_py.gates.check import Check, check_absolute, check_relative
from msprof_py.gates.diff import Diff, NotComparable, diff, diff_figures
from msprof_py.gates.figures import GateFigures, all_ranks, figures
from msprof_py.gates.gate import GateResult, GateUsageError, gate, gate_figures

__all__ = [
    "Budget",
    "BudgetError",
    "Check",
    "Diff",
    "GateFigures",
    "GateResult",
    "GateUsageError",
    "NotComparable",
    "all_ranks",
    "check_absolute",
    "check_relative",
    "diff",
    "diff_figures",
    "figures",
    "gate",
    "gate_figures",
    "init_budget",
    "load_budget",
    "parse_budget",
]
