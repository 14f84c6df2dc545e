"""CI performance gates: the figures a gate checks, budgets, ``msprof gate``/``msprof diff``."""

from msprof_py.gates.figures import GateFigures, all_ranks, figures

__all__ = ["GateFigures", "all_ranks", "figures"]
