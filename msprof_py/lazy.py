"""Package attributes imported on first use (PEP 562 ``__getattr__``).

The ``msprof`` launcher, every recorded process and every bad-input error import the packages
only to reach a few light names; the heavy ones (pandas behind loading, analysing, exporting,
reporting; torch behind recording) come from their modules when first asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_getattr(
    package: str, namespace: dict[str, Any], names: Mapping[str, str]
) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` answering ``names`` (attribute -> module it
    comes from): the value is imported on first use and stored in ``namespace`` (the package's
    ``globals()``), so later uses are plain attribute reads."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    __getattr__.__doc__ = f"The names imported on first use: {', '.join(sorted(names))}."
    return __getattr__
