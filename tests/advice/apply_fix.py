"""Run a sample script with one recommendation applied (used by the recommendation check).

    python apply_fix.py RECIPE_JSON SCRIPT [ARGS...]

RECIPE_JSON is a finding's ``evidence["apply"]``. Supported:

* ``{"optimizer": CLS, "kwargs": {...}}``: every ``torch.optim.CLS`` the script builds gets
  those keyword arguments (a script passing ``foreach`` keeps it only without ``fused``,
  which torch refuses together);
* ``{"attention": "npu_fusion_attention"}``: the script's own ``--attention fused`` option
  (a script without one cannot take this recipe).
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


def main() -> None:
    recipe = json.loads(sys.argv[1])
    script = sys.argv[2]
    args = sys.argv[3:]
    if "optimizer" in recipe:
        apply_optimizer_kwargs(recipe["optimizer"], recipe["kwargs"])
    elif "attention" in recipe:
        args = [*args, *attention_args(script, recipe["attention"])]
    else:
        raise SystemExit(f"unknown recipe {recipe!r}")
    sys.argv = [script, *args]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
