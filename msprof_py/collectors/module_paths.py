"""Which ``nn.Module`` the application is running: class path and instance path.

The session's global forward hooks push every module entered and pop it on return. The class
path (``ResNet/Sequential/Bottleneck/Conv2d``) says what kind of layer an op belongs to; the
instance path (``layer2.0.conv1``, the name ``named_modules()`` and ``state_dict()`` use) says
which one. A module's name is its attribute name in the module that called it, looked up once
per (parent, child) pair: a module held in a container the parent iterates without calling
it (``for layer in self.layers``) is named as ``named_modules()`` names it (``layers.3``); a
module called by a module that does not own it is named by its class. ``torch.compile``'s
wrapper (``OptimizedModule``) stands for the module it compiled (its ``_orig_mod``, under the
wrapper's name), so a graph launched by a compiled module is attributed to that module.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any

#: the path separators: class paths as before, instance paths as torch names modules
CLASS_SEP = "/"
INSTANCE_SEP = "."


class ModuleStack:
    """The modules being run, innermost last, with their joined paths kept current.

    A module pushed while it is already the innermost one (a compiled module: its wrapper's
    hook enters it, then its own hook fires when Dynamo runs it eagerly) adds no level to the
    paths.
    """

    __slots__ = ("_class_paths", "_modules", "_names", "_paths", "class_path", "instance_path")

    def __init__(self) -> None:
        self._modules: list[Any] = []
        #: class path and instance path of every level (joined, so pop is free)
        self._class_paths: list[str] = []
        self._paths: list[str] = []
        #: (id(parent), id(child)) -> the two weakly (dropping the entry when one dies), and the
        #: child's name
        self._names: dict[tuple[int, int], tuple[Any, Any, str]] = {}
        #: ``Model/Block/Conv2d`` of the innermost module ("" outside any module)
        self.class_path = ""
        #: ``block.0.conv`` of the innermost module ("" for the top-level module or none)
        self.instance_path = ""

    def __len__(self) -> int:
        return len(self._modules)

    def push(self, module: Any) -> None:
        """``module``'s forward starts."""
        parent = self._modules[-1] if self._modules else None
        if parent is None:
            cls, path = type(module).__name__, ""
        elif parent is module:
            cls, path = self.class_path, self.instance_path
        else:
            cls = f"{self.class_path}{CLASS_SEP}{type(module).__name__}"
            name = self._name(parent, module)
            above = self.instance_path
            path = f"{above}{INSTANCE_SEP}{name}" if above else name
        self._modules.append(module)
        self._class_paths.append(cls)
        self._paths.append(path)
        self.class_path, self.instance_path = cls, path

    def pop(self) -> None:
        """The innermost module returned (no-op on an empty stack)."""
        if not self._modules:
            return
        self._modules.pop()
        self._class_paths.pop()
        self._paths.pop()
        self.class_path = self._class_paths[-1] if self._class_paths else ""
        self.instance_path = self._paths[-1] if self._paths else ""

    def _name(self, parent: Any, module: Any) -> str:
        key = (id(parent), id(module))
        known = self._names.get(key)
        if known is not None:
            return known[2]
        name = child_name(parent, module)
        # ids are reused once a module is freed: the entry goes when either module dies, before
        # its id can be given to another (a module type without weak references is named
        # every time)
        names = self._names

        def forget(_: object) -> None:
            names.pop(key, None)

        with contextlib.suppress(TypeError):
            names[key] = (weakref.ref(parent, forget), weakref.ref(module, forget), name)
        return name


#: how deep :func:`child_name` looks below the calling module for the one it called
SEARCH_DEPTH = 4


def child_name(parent: Any, module: Any) -> str:
    """The name of ``module`` relative to ``parent`` as ``named_modules()`` gives it: its
    attribute name among ``parent``'s submodules, or the dotted path below a container the
    parent iterates without calling it (``layers.3`` in ``for layer in self.layers``),
    else its class name."""
    children = getattr(parent, "_modules", None) or {}
    for name, child in children.items():
        if child is module or getattr(child, "_orig_mod", None) is module:
            return name
    found = _find_below(children, module, SEARCH_DEPTH - 1)
    return found if found is not None else type(module).__name__


def _find_below(children: dict[str, Any], module: Any, depth: int) -> str | None:
    """``a.b`` when ``module`` is a submodule ``b`` of the child ``a`` (breadth first)."""
    level = [(name, child) for name, child in children.items() if child is not None]
    for _ in range(depth):
        below: list[tuple[str, Any]] = []
        for prefix, child in level:
            for name, grandchild in (getattr(child, "_modules", None) or {}).items():
                if grandchild is None:
                    continue
                if grandchild is module or getattr(grandchild, "_orig_mod", None) is module:
                    return f"{prefix}{INSTANCE_SEP}{name}"
                below.append((f"{prefix}{INSTANCE_SEP}{name}", grandchild))
        if not below:
            return None
        level = below
    return None
