"""Layer rules from docs/architecture.md: the device layer imports no torch and nothing above it;
the analysis side imports no torch and no live runtime."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "msprof_py"


def _imports(folder: Path) -> set[str]:
    names: set[str] = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
    return names


def test_device_imports_only_itself_from_the_package_and_never_torch() -> None:
    for name in _imports(PACKAGE / "device"):
        assert not name.startswith("torch"), name
        if name.startswith("msprof_py"):
            assert name.startswith("msprof_py.device"), name


#: the one kernels module that registers kernels as torch ops (it needs torch and the adapter)
KERNELS_TORCH = "torch_op.py"


def _imports_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_kernels_import_only_device_and_themselves_and_never_torch() -> None:
    for path in (PACKAGE / "kernels").rglob("*.py"):
        if path.name == KERNELS_TORCH:
            continue
        for name in _imports_of(path):
            assert not name.startswith("torch"), f"{path.name} imports {name}"
            if name.startswith("msprof_py"):
                allowed = ("msprof_py.device", "msprof_py.kernels")
                assert name.startswith(allowed), f"{path.name} imports {name}"


def test_only_the_torch_op_module_of_kernels_imports_torch_and_nothing_imports_it() -> None:
    torch_users = {
        p.name
        for p in (PACKAGE / "kernels").rglob("*.py")
        if any(n.startswith("torch") for n in _imports_of(p))
    }
    assert torch_users == {KERNELS_TORCH}
    for path in (PACKAGE / "kernels").rglob("*.py"):
        assert "msprof_py.kernels.torch_op" not in _imports_of(path), path.name


#: graph mode's planning half: the IR, the passes and the planners work on the torch-free IR
GRAPH_TORCH_FREE = (
    "ir.py", "dataflow.py", "fused_cost.py", "memory_plan.py", "stream_plan.py", "pipeline.py",
)  # fmt: skip


def test_graph_planning_never_imports_torch() -> None:
    graph = PACKAGE / "graph"
    paths = [graph / name for name in GRAPH_TORCH_FREE] + list((graph / "passes").rglob("*.py"))
    for path in paths:
        for name in _imports_of(path):
            assert not name.startswith("torch"), f"{path.name} imports {name}"
            if name.startswith("msprof_py"):
                allowed = ("msprof_py.device", "msprof_py.graph")
                assert name.startswith(allowed), f"{path.name} imports {name}"


def test_acl_does_not_import_torch() -> None:
    assert not any(name.startswith("torch") for name in _imports(PACKAGE / "acl"))


def test_importing_device_and_acl_loads_no_torch() -> None:
    code = (
        "import sys, msprof_py.device, msprof_py.acl, msprof_py.kernels, msprof_py.kernels.tik; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


#: the analysis side works on stored profiles: no torch, no live runtime, and per layer the
#: other layers it must not reach
ANALYSIS_SIDE = {
    "profile": ("adapter", "collectors", "acl", "analyzers", "exporters", "report", "gates"),
    "analyzers": ("adapter", "collectors", "acl", "exporters", "report", "gates"),
    "exporters": ("adapter", "collectors", "acl", "device", "report", "gates"),
    "report": ("adapter", "collectors", "acl", "exporters", "gates"),
    "gates": ("adapter", "collectors", "acl", "device", "exporters", "report"),
    # importers are the loader's inverse of the exporters (their file names and columns)
    "importers": ("adapter", "collectors", "acl", "analyzers", "report", "gates"),
    "compare": ("adapter", "collectors", "acl", "exporters", "report"),
}


@pytest.mark.parametrize("layer", sorted(ANALYSIS_SIDE))
def test_analysis_side_uses_only_stored_profiles(layer: str) -> None:
    for name in _imports(PACKAGE / layer):
        assert not name.startswith("torch"), f"{layer} imports {name}"
        for banned in ANALYSIS_SIDE[layer]:
            assert not name.startswith(f"msprof_py.{banned}"), f"{layer} imports {name}"


def test_msprof_analyze_starts_without_torch() -> None:
    modules = ", ".join(
        ["msprof_py.cli", "msprof_py.analyzers.command", "msprof_py.analyzers.render"]
        + [f"msprof_py.{layer}" for layer in ANALYSIS_SIDE]
    )
    code = f"import sys, {modules}; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
