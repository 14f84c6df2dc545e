"""The import hook that makes ``import torch_npu``, ``torchair`` and ``torchvision_npu`` load
msprof-py's shims.

``torch_npu`` and every ``torch_npu.X`` resolve to ``msprof_py.adapter.torch_npu.X`` (likewise
``torchair`` to ``msprof_py.adapter.torchair``): the real module is imported (running its
import-time effects, e.g. ``transfer_to_npu``'s patches) and also registered under the alias.
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
#: alias package -> the shim package it resolves to
ALIASES = {
    ALIAS: TARGET,
    "torchair": "msprof_py.adapter.torchair",
    "torchvision_npu": "msprof_py.adapter.torchvision_npu",
}


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
        alias = fullname.partition(".")[0]
        target = ALIASES.get(alias)
        if target is None:
            return None
        real = target + fullname[len(alias) :]
        if importlib.util.find_spec(real) is None:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(real))


def install_import_hook() -> None:
    """Resolve ``torch_npu`` and ``torchair`` to the shims from now on in this process
    (idempotent)."""
    if not any(isinstance(finder, _AliasFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AliasFinder())
