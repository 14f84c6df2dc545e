"""Run a sample script with one recommendation applied (used by the recommendation check).

    python apply_fix.py RECIPE_JSON SCRIPT [ARGS...]

RECIPE_JSON is a finding's ``evidence["apply"]``, or a list of them (applied together, in
order: the joint check). Supported:

* ``{"optimizer": CLS, "kwargs": {...}}``: every ``torch.optim.CLS`` the script builds gets
  those keyword arguments (a script passing ``foreach`` keeps it only without ``fused``,
  which torch refuses together);
* ``{"attention": "npu_fusion_attention"}``: the script's own ``--attention fused`` option
  (a script without one cannot take this recipe);
* ``{"autocast": DTYPE}``: the forward pass runs under ``torch.autocast("npu", DTYPE)``: every
  npu autocast region the script opens is enabled in DTYPE, and the outermost module call runs
  in one when the script opens none (no GradScaler is added: bf16 does not need one);
  ``{"autocast": null}``: every npu autocast region is disabled (float32 training);
* ``{"grad_scaler": false}``: every GradScaler is built disabled (its methods pass through);
* ``{"compile": BACKEND}``: the outermost module call runs through
  ``torch.compile(module, backend=BACKEND)`` (each module compiled once; inner calls and the
  optimizer stay eager, as a user wrapping ``model`` would have it);
* ``{"batch_size": N}``: the script's own ``--batch-size`` option set to N (a script without
  one cannot take this recipe);
* ``{"sync": "defer"}``: the host stops waiting for the device in the loop, as a script that
  logs every N steps (or once at the end) does: ``torch.npu.synchronize()`` returns at once,
  and ``Tensor.item()`` and ``Event.elapsed_time`` on npu give their values without the host
  wait (the simulator computes values and event times when the work is queued, so the values
  logged are the same; only the waits go);
* ``{"dtype": {"from": OLD, "to": NEW}}``: the script's own option for the dtype of its
  OLD tensors (:data:`DTYPE_OPTIONS`: ``--index-dtype`` for int64) set to NEW;
* ``{"internal_format": false}``: ``torch.npu.config.allow_internal_format = False`` before
  the script runs (tensors stay ND: no private formats, no TransData);
* ``{"script_option": [ARGS...]}``: ARGS appended to the script's arguments (an option of the
  script's own that applies the advice; the script must define each ``--option`` it is given).
"""

from __future__ import annotations

import json
import runpy
import sys
from typing import Any

import torch


def apply_optimizer_kwargs(cls_name: str, extra: dict[str, Any]) -> None:
    """Make ``torch.optim.<cls_name>(...)`` take ``extra`` keyword arguments."""
    cls = getattr(torch.optim, cls_name)
    init = cls.__init__

    def patched(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs.update(extra)
        if extra.get("fused"):
            kwargs.pop("foreach", None)
        init(self, *args, **kwargs)

    cls.__init__ = patched


def attention_args(script: str, api: str) -> list[str]:
    """The script arguments that make it run its attention as ``api``."""
    with open(script, encoding="utf-8") as f:
        if api != "npu_fusion_attention" or '"--attention"' not in f.read():
            raise SystemExit(f"{script} has no option to run its attention as {api}")
    return ["--attention", "fused"]


def batch_size_args(script: str, args: list[str], batch: int) -> list[str]:
    """``args`` with the script's ``--batch-size`` set to ``batch``."""
    with open(script, encoding="utf-8") as f:
        if '"--batch-size"' not in f.read():
            raise SystemExit(f"{script} has no --batch-size option")
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg == "--batch-size":
            skip = True
        elif not arg.startswith("--batch-size="):
            kept.append(arg)
    return [*kept, "--batch-size", str(batch)]


def apply_autocast(dtype_name: str | None) -> None:
    """Run every npu autocast region (and the outermost module call) in ``dtype_name``; with
    None, disable every npu autocast region."""
    dtype = getattr(torch, dtype_name) if dtype_name else None
    init = torch.amp.autocast.__init__

    def patched_init(self: Any, device_type: str, *args: Any, **kwargs: Any) -> None:
        if device_type == "npu":
            kwargs = {"enabled": False} if dtype is None else {"enabled": True, "dtype": dtype}
            args = ()
        init(self, device_type, *args, **kwargs)

    torch.amp.autocast.__init__ = patched_init
    if dtype is None:
        return
    call = torch.nn.Module.__call__

    def patched_call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if torch.is_autocast_enabled("npu"):
            return call(self, *args, **kwargs)
        with torch.autocast("npu", dtype=dtype):
            return call(self, *args, **kwargs)

    torch.nn.Module.__call__ = patched_call


def apply_compile(backend: str) -> None:
    """Run the outermost module call of the script through ``torch.compile``."""
    call = torch.nn.Module.__call__
    compiled: dict[int, Any] = {}
    depth = [0]

    def patched_call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if depth[0] or torch.compiler.is_compiling():
            return call(self, *args, **kwargs)
        if id(self) not in compiled:
            compiled[id(self)] = torch.compile(self, backend=backend)
        depth[0] += 1
        try:
            return compiled[id(self)](*args, **kwargs)
        finally:
            depth[0] -= 1

    torch.nn.Module.__call__ = patched_call


def defer_syncs() -> None:
    """Remove the host's waits for the device: ``torch.npu.synchronize`` does nothing, and
    ``Tensor.item()`` / ``Event.elapsed_time`` on npu read their values without a sync."""
    import msprof_py.adapter
    from msprof_py.adapter.tensors import host_view

    if not hasattr(torch, "npu"):
        msprof_py.adapter.install()
    item = torch.Tensor.item

    def deferred_item(self: torch.Tensor) -> Any:
        if self.device.type != "npu":
            return item(self)
        return host_view(self).item()

    def elapsed_time(self: Any, end_event: Any) -> float:
        start, end = self._event.recorded_ns, end_event._event.recorded_ns
        if start is None or end is None:
            raise RuntimeError("elapsed_time on an event that was not recorded")
        return (end - start) / 1e6

    torch.Tensor.item = deferred_item
    torch.npu.synchronize = lambda device=None: None
    torch.npu.Event.elapsed_time = elapsed_time


def script_option_args(script: str, args: list[str], extra: list[str]) -> list[str]:
    """``args`` with ``extra`` appended, each ``--option`` of it checked against the script."""
    with open(script, encoding="utf-8") as f:
        text = f.read()
    for opt in extra:
        name = opt.split("=", 1)[0]
        if name.startswith("--") and f'"{name}"' not in text:
            raise SystemExit(f"{script} has no {name} option")
    return [*args, *extra]


#: the script option that sets the dtype of a script's tensors of each dtype
DTYPE_OPTIONS = {"int64": "--index-dtype"}


def dtype_args(script: str, args: list[str], change: dict[str, str]) -> list[str]:
    """``args`` with the script's option for ``change["from"]`` tensors set to ``change["to"]``."""
    option = DTYPE_OPTIONS.get(change["from"])
    if option is None:
        raise SystemExit(f"no script option known for {change['from']} tensors")
    return script_option_args(script, args, [option, change["to"]])


def set_internal_format(allowed: bool) -> None:
    """Set ``torch.npu.config.allow_internal_format`` (installing the npu device first)."""
    import msprof_py.adapter

    if not hasattr(torch, "npu"):
        msprof_py.adapter.install()
    torch.npu.config.allow_internal_format = allowed


def disable_grad_scaler() -> None:
    """Build every ``torch.amp.GradScaler`` disabled."""
    cls = torch.amp.GradScaler
    init = cls.__init__

    def patched(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self._enabled = False

    cls.__init__ = patched


def apply(recipe: dict[str, Any], script: str, args: list[str]) -> list[str]:
    """Apply one recipe (patches, or script options added to ``args``); the new arguments."""
    if "optimizer" in recipe:
        apply_optimizer_kwargs(recipe["optimizer"], recipe["kwargs"])
    elif "attention" in recipe:
        args = [*args, *attention_args(script, recipe["attention"])]
    elif "autocast" in recipe:
        apply_autocast(recipe["autocast"])
    elif "compile" in recipe:
        apply_compile(recipe["compile"])
    elif "batch_size" in recipe:
        args = batch_size_args(script, args, int(recipe["batch_size"]))
    elif recipe.get("sync") == "defer":
        defer_syncs()
    elif "dtype" in recipe:
        args = dtype_args(script, args, recipe["dtype"])
    elif "script_option" in recipe:
        args = script_option_args(script, args, [str(a) for a in recipe["script_option"]])
    elif "internal_format" in recipe:
        set_internal_format(bool(recipe["internal_format"]))
    elif recipe.get("grad_scaler") is False:
        disable_grad_scaler()
    else:
        raise SystemExit(f"unknown recipe {recipe!r}")
    return args


def main() -> None:
    recipes = json.loads(sys.argv[1])
    script = sys.argv[2]
    args = sys.argv[3:]
    for recipe in recipes if isinstance(recipes, list) else [recipes]:
        args = apply(recipe, script, args)
    sys.argv = [script, *args]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
