"""The gates work on stored profiles only (ARCHITECTURE.md): no torch, no live runtime."""

from __future__ import annotations

import ast
from pathlib import Path

GATES = Path(__file__).resolve().parents[2] / "msprof_py" / "gates"


def test_gates_import_no_torch_and_no_live_runtime() -> None:
    for path in GATES.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert not name.startswith("torch"), f"{path.name} imports {name}"
                for live in ("msprof_py.adapter", "msprof_py.collectors", "msprof_py.device"):
                    assert not name.startswith(live), f"{path.name} imports {name}"
