"""How an optimizer runs its step: fused kernels, multi-tensor (``foreach``) or per parameter.

The recorder keeps leaf ops only. A ``_foreach_*`` op that runs as multi-tensor kernels is
recorded under its own name, but one that takes PyTorch's per-tensor route (chips before the
910B, mixed dtypes ...; see ``msprof_py/adapter/foreach.py``) is recorded as per-tensor ops,
which look like a per-parameter step. The mode is therefore taken from the optimizer itself
when it steps and stored in the profile's ``meta.json`` (``optimizers``: class -> mode and
settings), where the fused-optimizer rule reads it.
"""

from __future__ import annotations

from typing import Any

FUSED, FOREACH, PER_PARAMETER = "fused", "foreach", "per-parameter"


def optimizer_mode(optimizer: Any) -> dict[str, Any]:
    """``{"mode": ..., "foreach": ..., "fused": ..., "params": n}`` of ``optimizer`` (the first
    param group's settings; ``foreach``/``fused`` as the user passed them, None = default)."""
    groups = getattr(optimizer, "param_groups", None) or [{}]
    group = groups[0]
    foreach, fused = group.get("foreach"), group.get("fused")
    params = [p for g in groups for p in g.get("params", [])]
    mode = PER_PARAMETER
    if fused or type(optimizer).__name__.startswith("NpuFused"):
        mode = FUSED
    elif foreach:
        mode = FOREACH
    elif foreach is None and "foreach" in group:
        mode = FOREACH if _default_foreach(params, group) else PER_PARAMETER
    return {"mode": mode, "foreach": foreach, "fused": fused, "params": len(params)}


def _default_foreach(params: list[Any], group: dict[str, Any]) -> bool:
    """What torch picks for ``foreach=None`` (its private helper; per parameter if it moved)."""
    try:
        from torch.optim.optimizer import _default_to_fused_or_foreach
    except ImportError:
        return False
    differentiable = bool(group.get("differentiable", False))
    try:
        return bool(_default_to_fused_or_foreach(params, differentiable, use_fused=False)[1])
    except (TypeError, RuntimeError):
        return False
