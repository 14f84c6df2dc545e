"""The session follows module calls by wrapping ``nn.Module.__call__`` (no global hooks)."""

from __future__ import annotations

import pytest
import torch

from msprof_py.collectors.module_calls import follow_module_calls
from msprof_py.collectors.module_paths import ModuleStack


class _Probe(torch.nn.Module):
    """Notes the stack's paths when its forward runs; raises when told to."""

    def __init__(self, stack: ModuleStack, seen: list[tuple[str, str]]) -> None:
        super().__init__()
        self.stack, self.seen, self.fail = stack, seen, False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append((self.stack.class_path, self.stack.instance_path))
        if self.fail:
            raise ValueError("forward failed")
        return x


def _net(stack: ModuleStack, seen: list[tuple[str, str]]) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Sequential(_Probe(stack, seen)))


def test_each_module_runs_inside_its_own_level_of_the_stack() -> None:
    stack, seen = ModuleStack(), []
    net = _net(stack, seen)
    undo = follow_module_calls(stack)
    try:
        net(torch.ones(1, 2))
        net(torch.ones(1, 2))  # the cached paths are the same as the first call's
    finally:
        undo()
    assert seen == [("Sequential/Sequential/_Probe", "1.0")] * 2
    assert "1.0" in dict(net.named_modules())
    assert len(stack) == 0


def test_a_forward_that_raises_leaves_the_stack_as_it_was() -> None:
    stack, seen = ModuleStack(), []
    net = _net(stack, seen)
    net[1][0].fail = True
    undo = follow_module_calls(stack)
    try:
        with pytest.raises(ValueError, match="forward failed"):
            net(torch.ones(1, 2))
        assert (len(stack), stack.class_path, stack.instance_path) == (0, "", "")
    finally:
        undo()


def test_undo_restores_call_and_leaves_the_wrapper_inert() -> None:
    original = torch.nn.Module.__call__
    stack, seen = ModuleStack(), []
    undo = follow_module_calls(stack)
    wrapper = torch.nn.Module.__call__
    assert wrapper is not original
    undo()
    assert torch.nn.Module.__call__ is original
    # a module bound to the wrapper meanwhile (torch.compile binds __call__) still runs, and
    # the stack no longer follows it
    net = _net(stack, seen)
    wrapper(net, torch.ones(1, 2))
    assert seen == [("", "")]


def test_undo_leaves_a_later_patch_of_call_in_place() -> None:
    original = torch.nn.Module.__call__
    undo = follow_module_calls(ModuleStack())
    ours = torch.nn.Module.__call__

    def later(self: torch.nn.Module, *args: object, **kwargs: object) -> object:
        return ours(self, *args, **kwargs)

    torch.nn.Module.__call__ = later  # type: ignore[method-assign]
    try:
        undo()
        assert torch.nn.Module.__call__ is later
    finally:
        torch.nn.Module.__call__ = original  # type: ignore[method-assign]


def test_measured_host_time_discounts_the_stacks_own_time() -> None:
    stack, seen = ModuleStack(), []
    net = _net(stack, seen)
    discounted: list[int] = []
    undo = follow_module_calls(stack, discounted.append)
    try:
        net(torch.ones(1, 2))
    finally:
        undo()
    # four module calls (Sequential, Linear, Sequential, _Probe): a push and a pop each
    assert len(discounted) == 8
    assert all(isinstance(t, int) and t > 0 for t in discounted)
