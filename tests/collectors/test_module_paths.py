"""Module instance paths (layer2.0.conv1) beside class paths, recorded per host op."""

from __future__ import annotations

from pathlib import Path

import torch

import msprof_py
from msprof_py.collectors.module_paths import ModuleStack, child_name


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
        self.act = torch.nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.proj(x))


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(_Block(), _Block())
        self.head = torch.nn.Linear(4, 2)
        self.loss = torch.nn.MSELoss()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.layers(x))


def test_stack_joins_instance_names_as_named_modules_does() -> None:
    net = _Net()
    stack = ModuleStack()
    stack.push(net)
    assert (stack.class_path, stack.instance_path) == ("_Net", "")
    stack.push(net.layers)
    stack.push(net.layers[1])
    stack.push(net.layers[1].proj)
    assert stack.instance_path == "layers.1.proj"
    assert stack.class_path == "_Net/Sequential/_Block/Linear"
    assert stack.instance_path in dict(net.named_modules())
    stack.pop()
    stack.pop()
    assert stack.instance_path == "layers"
    for _ in range(3):
        stack.pop()  # one pop more than pushes is harmless
    assert (len(stack), stack.class_path, stack.instance_path) == (0, "", "")


def test_a_freed_modules_id_reused_by_another_child_gives_that_childs_name() -> None:
    """Names are cached by (parent, child) ids; once a child is freed, CPython may give its id
    to a new module (a graph-mode sample once recorded ``layers.2.down`` for ``layers.2.conv1``
    this way): the entry goes with the module, and the new one gets its own name."""
    parent = torch.nn.Module()
    parent.first = torch.nn.Linear(2, 2)
    stack = ModuleStack()
    stack.push(parent)
    stack.push(parent.first)
    assert stack.instance_path == "first"
    stack.pop()
    key = (id(parent), id(parent.first))
    del parent.first
    assert key not in stack._names  # dropped when the module died
    kept = []  # modules made until one takes the freed id (CPython reuses it at once)
    while len(kept) < 1000:
        kept.append(torch.nn.Linear(2, 2))
        if id(kept[-1]) == key[1]:
            break
    parent.second = kept[-1]
    stack.push(parent.second)
    assert stack.instance_path == "second"
    stack.pop()
    assert (id(parent), id(parent.second)) in stack._names
    stack.push(parent.second)  # served from the cache now
    assert stack.instance_path == "second"


def test_a_module_its_caller_does_not_own_is_named_by_class() -> None:
    net = _Net()
    stranger = torch.nn.Tanh()
    assert child_name(net, net.head) == "head"
    assert child_name(net, stranger) == "Tanh"


def test_compiled_submodule_takes_the_wrappers_name() -> None:
    class Wrapper:  # stands for OptimizedModule: holds the module as _orig_mod
        def __init__(self, inner: torch.nn.Module) -> None:
            self._orig_mod = inner

    parent = torch.nn.Module()
    inner = torch.nn.Linear(2, 2)
    parent._modules["encoder"] = Wrapper(inner)  # type: ignore[assignment]
    assert child_name(parent, inner) == "encoder"


def test_recorded_ops_carry_the_instance_path(tmp_path: Path) -> None:
    with msprof_py.record(tmp_path / "prof") as rec:
        net = _Net().to("npu")
        out = net(torch.randn(3, 4, device="npu"))
        net.loss(out, torch.zeros(3, 2, device="npu")).backward()
    ops = rec.load().host_events
    ops = ops[ops["kind"] == "op"]
    relu = ops[ops["name"] == "aten::relu"]
    assert list(relu["module_path"]) == ["layers.0.act", "layers.1.act"]
    assert set(relu["module"]) == {"_Net/Sequential/_Block/ReLU"}
    # the loss module is called outside the model: a top-level module of its own
    loss = ops[ops["module"] == "MSELoss"]
    assert len(loss) > 0 and set(loss["module_path"]) == {""}
    paths = set(ops["module_path"]) - {""}
    assert paths <= set(dict(net.named_modules()))
