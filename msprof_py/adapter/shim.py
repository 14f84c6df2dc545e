"""The import hook that makes ``import torch_npu`` load msprof-py's shim.

``torch_npu`` and every ``torch_npu.X`` resolve to ``msprof_py.adapter.torch_npu.X``: the real
module is imported (running its import-time effects, e.g. ``transfer_to_npu``'s patches) and
also registered under the ``torch_npu`` name.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from importlib.machinery import ModuleSpec
from types import ModuleType

ALIAS = "torch_npu"
TARGET = "msprof_py.adapter.torch_npu"


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        """The target module ran when it was imported in :meth:`create_module`."""


class _AliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> ModuleSpec | None:
        if fullname != ALIAS and not fullname.startswith(ALIAS + "."):
            return None
        real = TARGET + fullname[len(ALIAS) :]
        if importlib.util.find_spec(real) is None:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(real))


def install_import_hook() -> None:
    """Resolve ``torch_npu`` to the shim from now on in this process (idempotent)."""
    if not any(isinstance(finder, _AliasFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AliasFinder())
