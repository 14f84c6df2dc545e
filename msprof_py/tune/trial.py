"""One tuner trial, in a process of its own: ``python -m msprof_py.tune.trial SPEC_JSON``.

Installs the simulated device in shapes-only mode, builds the model from the factory the spec
names, runs two training steps at the spec's batch and prints one JSON line: the peak reserved
device memory, the device's memory and the simulated time of the second step, or the error.
"""

from __future__ import annotations

import importlib
import json
import runpy
import sys
from collections.abc import Callable
from typing import Any

#: where a factory defined in the caller's main script is loaded from (its main block does
#: not run under this name)
SCRIPT_RUN_NAME = "__msprof_tune__"


def load_factory(ref: dict[str, str]) -> Callable[[], Any]:
    """The model factory ``ref`` names: ``{"module": ..., "name": ...}`` or, for a function of
    a script, ``{"file": ..., "name": ...}``."""
    if ref.get("file"):
        namespace = runpy.run_path(ref["file"], run_name=SCRIPT_RUN_NAME)
        return namespace[ref["name"]]
    module = importlib.import_module(ref["module"])
    target: Any = module
    for part in ref["name"].split("."):
        target = getattr(target, part)
    return target


def _step(model: Any, optimizer: Any, inputs: Any, amp: str) -> None:
    import torch

    if amp:
        with torch.autocast("npu", dtype=getattr(torch, amp)):
            out = model(inputs)
    else:
        out = model(inputs)
    if isinstance(out, (tuple, list)):
        out = out[0]
    elif hasattr(out, "logits"):
        out = out.logits
    out.float().mean().backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """Measure one batch size (see the module)."""
    import torch

    import msprof_py.adapter as adapter

    npu = adapter.install(spec["device"], numerics="none")
    torch.manual_seed(0)
    try:
        model = load_factory(spec["factory"])().to("npu")
        make = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}
        optimizer = make[spec["optimizer"]](model.parameters(), lr=1e-3)
        shape = (spec["batch"], *spec["input_shape"])
        dtype = getattr(torch, spec["input_dtype"])
        inputs = torch.zeros(shape, dtype=dtype).to("npu")
        _step(model, optimizer, inputs, spec["amp"])
        torch.npu.synchronize()
        start = npu.engine.host_ns
        _step(model, optimizer, inputs, spec["amp"])
        torch.npu.synchronize()
        step_ns = npu.engine.host_ns - start
    except torch.OutOfMemoryError:
        return {"error": "out of memory"}
    _, total = torch.npu.mem_get_info()
    return {
        "peak_bytes": torch.npu.max_memory_reserved(),
        "capacity_bytes": total,
        "step_ns": step_ns,
    }


def main() -> None:
    """Entry point: the spec as the first argument, one JSON line on stdout."""
    print(json.dumps(run(json.loads(sys.argv[1]))), flush=True)


if __name__ == "__main__":
    main()
