"""Which ``nn.Module`` the application is running: class path and instance path.

The session's wrapper of ``nn.Module.__call__`` (``module_calls.py``) pushes every module
entered and pops it on return. The class path (``ResNet/Sequential/Bottleneck/Conv2d``) says
what kind of layer an op belongs to; the instance path (``layer2.0.conv1``, the name
``named_modules()`` and ``state_dict()`` use) says which one. A module's name is its attribute
name in the module that called it, looked up once per (parent, child) pair: a module held in a
container the parent iterates without calling it (``for layer in self.layers``) is named as
``named_modules()`` names it (``layers.3``); a module called by a module that does not own it
is named by its class. ``torch.compile``'s wrapper (``OptimizedModule``) stands for the module
it compiled (its ``_orig_mod``, under the wrapper's name), so a graph launched by a compiled
module is attributed to that module.
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
    call enters it, then its own call runs when Dynamo runs it eagerly) adds no level to the
    paths. The joined paths of a (parent, child) pair are cached with the child's name and
    reused while the parent's own paths are the same, so a push in a model run before costs
    a dictionary lookup and no string building.
    """

    __slots__ = ("_levels", "_names", "class_path", "instance_path")

    def __init__(self) -> None:
        #: (module, class path, instance path) of every level, innermost last
        self._levels: list[tuple[Any, str, str]] = []
        #: (id(parent), id(child)) -> [parent and child weakly (the entry goes when one dies),
        #: the child's name, the parent's class and instance paths, the child's joined two]
        self._names: dict[tuple[int, int], list[Any]] = {}
        #: ``Model/Block/Conv2d`` of the innermost module ("" outside any module)
        self.class_path = ""
        #: ``block.0.conv`` of the innermost module ("" for the top-level module or none)
        self.instance_path = ""

    def __len__(self) -> int:
        return len(self._levels)

    def push(self, module: Any) -> None:
        """``module``'s forward starts."""
        levels = self._levels
        if not levels:
            cls, path = type(module).__name__, ""
        else:
            parent, above_cls, above_path = levels[-1]
            if parent is module:
                cls, path = above_cls, above_path
            else:
                known = self._names.get((id(parent), id(module)))
                if known is not None and known[3] == above_cls and known[4] == above_path:
                    cls, path = known[5], known[6]
                else:
                    cls, path = self._join(parent, module, above_cls, above_path)
        levels.append((module, cls, path))
        self.class_path, self.instance_path = cls, path

    def pop(self) -> None:
        """The innermost module returned (no-op on an empty stack)."""
        levels = self._levels
        if not levels:
            return
        levels.pop()
        if levels:
            _, self.class_path, self.instance_path = levels[-1]
        else:
            self.class_path = self.instance_path = ""

    def _join(self, parent: Any, module: Any, above_cls: str, above_path: str) -> tuple[str, str]:
        """``module``'s class and instance paths below ``parent``'s, cached for the pair."""
        key = (id(parent), id(module))
        known = self._names.get(key)
        name = known[2] if known is not None else child_name(parent, module)
        cls = f"{above_cls}{CLASS_SEP}{type(module).__name__}"
        path = f"{above_path}{INSTANCE_SEP}{name}" if above_path else name
        if known is not None:
            known[3:] = [above_cls, above_path, cls, path]
            return cls, path
        # ids are reused once a module is freed: the entry goes when either module dies, before
        # its id can be given to another (a module type without weak references is named
        # every time)
        names = self._names

        def forget(_: object) -> None:
            names.pop(key, None)

        with contextlib.suppress(TypeError):
            entry = [weakref.ref(parent, forget), weakref.ref(module, forget), name]
            names[key] = [*entry, above_cls, above_path, cls, path]
        return cls, path


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
