"""Recompiles are counted per code object; past Dynamo's limit the code runs eagerly and the
run keeps working."""

from __future__ import annotations

import torch

from msprof_py.device import HostKind, SimulatedNpu, TaskLog
from msprof_py.graph import recompiles


def scale_shift(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


def test_recompiles_are_counted_and_the_limit_falls_back_to_eager(
    npu: SimulatedNpu, log: TaskLog
) -> None:
    limit = 3
    compiled = torch.compile(scale_shift, backend="npu", dynamic=False)
    with torch._dynamo.config.patch(recompile_limit=limit):
        for n in range(1, limit + 3):  # a new shape each call: a recompile each time
            x = torch.arange(n, dtype=torch.float32)
            start = len(log.host)
            out = compiled(x.to("npu"))
            assert torch.equal(out.cpu(), x * 2 + 1)
            graph_launch = any(
                h.kind is HostKind.LAUNCH and h.name.startswith("ModelExecute")
                for h in log.host[start:]
            )
            assert graph_launch == (n <= limit)  # past the limit: eager ops, no graph
    (entry,) = [e for e in recompiles.stats().values() if e.code.startswith("scale_shift")]
    assert entry.compiles == limit and entry.recompiles == limit - 1
    assert entry.limit == limit and entry.limit_reached
    assert entry.code.startswith("scale_shift (") and __file__ in entry.code


def test_one_compile_is_not_a_recompile(npu: SimulatedNpu) -> None:
    compiled = torch.compile(scale_shift, backend="npu")
    for _ in range(3):
        compiled(torch.ones(4).to("npu"))
    (entry,) = recompiles.stats().values()
    assert entry.compiles == 1 and entry.recompiles == 0 and not entry.limit_reached
    assert entry.limit == torch._dynamo.config.recompile_limit == 8
