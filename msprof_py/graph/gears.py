"""GE's dynamic gears for compiled graphs: ``torchair.inference.set_dim_gears``.

A dynamic-shape graph (``torch.compile(..., dynamic=True)``) whose inputs vary in a few
dimensions over a few sizes can be split into gears: each gear is a static subgraph (GE picks
it per call, MapIndex -> Case), so it keeps what static graphs get (several streams, the
static-only fusions, one-shot sink) instead of the dynamic graph's single stream. TorchAir's
API (hiascend TorchAir guide, "set_dim_gears"): ``set_dim_gears(t, dim_gears={0: [2, 4]})``
on an input tensor before the first call; several inputs' gears combine by
``inference_config.dynamic_gears_merge_policy``, ``"zip"`` (default: the i-th sizes of every
list together) or ``"product"`` (every combination); at most 100 gears; sizes 0 and 1 are not
allowed (Dynamo symbolises sizes from 2); a size outside the gears fails; one tensor cannot be
given two different gear sets; max-autotune mode only.

Here every gear is compiled when the graph first runs: one graph build plus the op nodes of
each gear (:func:`gears_compile_ns`, the graph compile model's figures, [U]); a call whose
sizes are a gear then runs that gear's static plan with no further compile, and a call whose
sizes are not one is a one-line error.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from msprof_py.graph.config import COMPILE_BASE_NS, COMPILE_NODE_NS

#: the tensor attribute holding its gears ({dim: (sizes...)})
ATTR = "_msprof_dim_gears"
MAX_GEARS = 100
POLICIES = ("zip", "product")


class GearError(ValueError):
    """Gears that cannot be set or a call outside them (one line)."""


def set_dim_gears(t: Any, dim_gears: Mapping[int, Sequence[int]]) -> None:
    """Set the gears of tensor ``t`` (see the module): ``{dim: [size, ...]}``."""
    import torch

    if not isinstance(t, torch.Tensor):
        raise GearError(f"set_dim_gears: t must be a tensor, got {type(t).__name__}")
    if not isinstance(dim_gears, Mapping) or not dim_gears:
        raise GearError("set_dim_gears: dim_gears must be a non-empty {dim: [sizes]} dict")
    gears: dict[int, tuple[int, ...]] = {}
    for dim, sizes in dim_gears.items():
        if isinstance(dim, bool) or not isinstance(dim, int) or not -t.dim() <= dim < t.dim():
            raise GearError(
                f"set_dim_gears: dim {dim!r} is not a dimension of a {t.dim()}-d tensor"
            )
        if not isinstance(sizes, (list, tuple)) or not sizes:
            raise GearError(f"set_dim_gears: the gears of dim {dim} must be a list of sizes")
        if any(isinstance(s, bool) or not isinstance(s, int) or s < 2 for s in sizes):
            raise GearError(
                f"set_dim_gears: gears must be integers >= 2 (0 and 1 are not symbolised), "
                f"got {list(sizes)} for dim {dim}"
            )
        gears[dim % t.dim()] = tuple(sizes)
    count = 1
    for sizes in gears.values():
        count *= len(sizes)
    if count > MAX_GEARS:
        raise GearError(f"set_dim_gears: {count} gears, more than {MAX_GEARS}")
    old = getattr(t, ATTR, None)
    if old is not None and old != gears:
        raise GearError("set_dim_gears: this tensor already has different gears")
    setattr(t, ATTR, gears)
    torch._dynamo.mark_dynamic(t, sorted(gears))


@dataclass(frozen=True)
class Gears:
    """A graph's gears: which (input index, dim) pairs vary and the size tuples allowed."""

    axes: tuple[tuple[int, int], ...]
    combos: frozenset[tuple[int, ...]]

    def key(self, args: Sequence[Any]) -> tuple[int, ...]:
        """The sizes of a call's geared dimensions."""
        return tuple(int(args[i].shape[d]) for i, d in self.axes)

    def check(self, args: Sequence[Any]) -> None:
        """Raise unless the call's sizes are one of the gears."""
        key = self.key(args)
        if key not in self.combos:
            pairs = zip(self.axes, key, strict=True)
            shown = ", ".join(f"input {i} dim {d} = {s}" for (i, d), s in pairs)
            allowed = sorted(self.combos)
            raise GearError(
                f"graph input sizes ({shown}) are not one of the {len(allowed)} gears set "
                f"with set_dim_gears ({allowed[:8]}{' ...' if len(allowed) > 8 else ''})"
            )


def collect(args: Sequence[Any], policy: str = "zip") -> Gears | None:
    """The gears of a graph from the tensors among its first call's ``args`` that carry
    them (None: none does), combined by ``policy``."""
    if policy not in POLICIES:
        raise GearError(
            f"dynamic_gears_merge_policy must be one of {', '.join(POLICIES)}, got {policy!r}"
        )
    axes: list[tuple[int, int]] = []
    lists: list[tuple[int, ...]] = []
    for i, a in enumerate(args):
        found = getattr(a, ATTR, None)
        if not found:
            continue
        for dim, sizes in sorted(found.items()):
            axes.append((i, dim))
            lists.append(sizes)
    if not axes:
        return None
    if policy == "zip":
        if len({len(s) for s in lists}) != 1:
            raise GearError(
                "dynamic_gears_merge_policy 'zip' needs the same number of gears on every "
                f"geared dimension, got {[len(s) for s in lists]}"
            )
        combos = set(zip(*lists, strict=True))
    else:
        combos = set(itertools.product(*lists))
    if len(combos) > MAX_GEARS:
        raise GearError(f"{len(combos)} gears after merging, more than {MAX_GEARS}")
    return Gears(tuple(axes), frozenset(combos))


def gears_compile_ns(op_nodes: int, gears: int) -> int:
    """Host time to compile every gear of a graph: one graph build, the op nodes per gear."""
    return COMPILE_BASE_NS + COMPILE_NODE_NS * max(0, op_nodes) * max(1, gears)
