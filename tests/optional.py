"""Optional test dependencies (timm, transformers, accelerate, msprof-analyze), imported when a
test first uses them rather than while pytest collects.

Every test process collects every test file, so a module-level import of a heavy package is
paid by each process, whether or not it runs that file's tests.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType
from typing import Any

import pytest


def installed(name: str) -> bool:
    """Whether the package ``name`` can be imported (found, not imported)."""
    return importlib.util.find_spec(name) is not None


def needs(*names: str) -> pytest.MarkDecorator:
    """A skip mark for tests that need the packages ``names``."""
    missing = [name for name in names if not installed(name)]
    return pytest.mark.skipif(bool(missing), reason=f"not installed: {', '.join(missing)}")


class LazyModule:
    """The module ``name``, imported on first attribute access."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str) -> Any:
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return getattr(self._module, attr)
