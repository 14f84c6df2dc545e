"""One host launch per graph call, kernels named after graph nodes, one workspace block per
call, compile time once, and torch.compile's default backend on npu goes to graph mode."""

from __future__ import annotations

import copy

import torch
from graph_models import cnn

from msprof_py.device import HostKind, SimulatedNpu, TaskLog
from msprof_py.graph.config import compile_ns
from msprof_py.graph.runner import compiled_graphs


def _graphs(before: set) -> dict:
    """The graphs compiled since ``before`` was taken, by name."""
    return {g.name: g for g in set(compiled_graphs()) - before}


def _step(model, x: torch.Tensor) -> None:
    model(x).sum().backward()


def _launches(log: TaskLog, start: int) -> list[str]:
    return [h.name for h in log.host[start:] if h.kind is HostKind.LAUNCH]


def _graph_launches(log: TaskLog, start: int = 0) -> list[str]:
    return [n for n in _launches(log, start) if n.startswith("ModelExecute ")]


def test_one_host_launch_per_graph_call_and_fewer_than_eager(
    npu: SimulatedNpu, log: TaskLog
) -> None:
    torch.manual_seed(0)
    base = cnn()
    eager = copy.deepcopy(base).to("npu")
    compiled = torch.compile(base.to("npu"), backend="npu")
    x = torch.randn(2, 3, 8, 8).to("npu")
    for _ in range(2):  # the first step converts weights to their kernel formats
        _step(eager, x)
        _step(compiled, x)

    start = len(log.host)
    _step(eager, x)
    eager_launches = len(_launches(log, start))

    start, first_task = len(log.host), len(log.tasks)
    _step(compiled, x)
    graph_launches = _graph_launches(log, start)
    assert graph_launches == ["ModelExecute graph0_forward", "ModelExecute graph0_backward"]
    # each graph's kernels share the launch time of its one host launch
    records = [h for h in log.host[start:] if h.name in graph_launches]
    tasks = log.tasks[first_task:]
    for record in records:
        first = next(t for t in tasks if t.task_id == record.task_id)
        in_graph = [t for t in tasks if t.launch_ns == first.launch_ns]
        assert len(in_graph) > 3
        # no other host launch produced any of them
        assert {t.task_id for t in in_graph}.isdisjoint(
            {h.task_id for h in log.host[start:] if h is not record}
        )
    compiled_launches = _launches(log, start)
    # the eager step launches every kernel; the compiled one two graphs plus the eager
    # ops outside them (loss sum, its seed gradient, gradient accumulation)
    outside = [n for n in compiled_launches if n not in graph_launches]
    assert all(n.startswith("aten::") for n in outside)
    assert len(compiled_launches) < eager_launches / 2


def test_kernel_names_are_graph_node_names(npu: SimulatedNpu, log: TaskLog) -> None:
    before = set(compiled_graphs())
    torch.manual_seed(0)
    model = torch.compile(cnn().to("npu"), backend="npu")
    x = torch.randn(2, 3, 8, 8).to("npu")
    _step(model, x)
    start = len(log.tasks)
    _step(model, x)
    graphs = _graphs(before)
    forward = graphs["graph0_forward"].plans[-1]
    planned = [k.name for k in forward.kernels]
    node_names = {n.name for n in forward.graph.nodes}
    assert all(name.rsplit("_", 1)[0] in node_names or name in node_names for name in planned)
    launched = [t.name for t in log.tasks[start:]]
    assert planned == [n for n in launched if n in set(planned)][: len(planned)]
    conv = next(t for t in log.tasks[start:] if t.op_type == "Conv2D")
    assert conv.name.startswith("convolution")
    assert conv.input_shapes[0] == (2, 3, 8, 8)


def test_compile_time_is_charged_once_per_graph(npu: SimulatedNpu, log: TaskLog) -> None:
    before = set(compiled_graphs())
    torch.manual_seed(0)
    model = torch.compile(cnn().to("npu"), backend="npu")
    x = torch.randn(2, 3, 8, 8).to("npu")
    for _ in range(3):
        _step(model, x)
    spans = [h for h in log.host if h.kind is HostKind.API and h.name.startswith("compile ")]
    assert [h.name for h in spans] == ["compile graph0_forward", "compile graph0_backward"]
    graphs = _graphs(before)
    for span in spans:
        gm = graphs[span.name.removeprefix("compile ")].gm
        ops = sum(1 for n in gm.graph.nodes if n.op == "call_function")
        assert span.end_ns - span.start_ns == compile_ns(ops)


def test_one_workspace_block_per_call_instead_of_intermediates(
    npu: SimulatedNpu, log: TaskLog
) -> None:
    before = set(compiled_graphs())
    torch.manual_seed(0)
    model = torch.compile(cnn().to("npu"), backend="npu")
    x = torch.randn(2, 3, 8, 8).to("npu")
    with torch.no_grad():
        model(x)
        start = len(log.memory)
        model(x)
    graph = _graphs(before)["graph0_inference"]
    plan = graph.plans[-1]
    mallocs = [m for m in log.memory[start:] if m.action.value == "malloc"]
    tags = [m.tag for m in mallocs]
    assert tags == ["graph0_inference workspace", "graph0_inference output"]
    workspace = mallocs[0]
    assert workspace.size >= plan.memory.workspace_bytes > 0
    # the workspace holds the intermediates (no reuse in the stub planner: their sum); a
    # buffer's new value written in place (AssignRemovePass: num_batches_tracked) is not one
    intermediates = [n for n in plan.graph.ops() if not n.view_of and n.kernels]
    written = {r for k in plan.kernels for r in k.outputs}
    assert plan.memory.no_reuse_bytes >= sum(
        n.outputs[0].nbytes
        for n in intermediates
        if not plan.graph.is_output(n.out(0)) and n.out(0) in written
    )
    frees = [m for m in log.memory[start:] if m.action.value == "free"]
    assert workspace.address in {m.address for m in frees}  # returned after the call


def test_default_backend_on_npu_is_graph_mode(npu: SimulatedNpu, log: TaskLog) -> None:
    torch.manual_seed(0)
    model = torch.compile(cnn().to("npu"))
    model(torch.randn(2, 3, 8, 8).to("npu")).sum().backward()
    assert _graph_launches(log) == ["ModelExecute graph0_forward", "ModelExecute graph0_backward"]
