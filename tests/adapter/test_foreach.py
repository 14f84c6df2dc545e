"""Multi-tensor (``_foreach_*``) ops: torch_npu's fast route (one host op, one kernel per
chunk of the lists) and PyTorch's per-tensor slow route, decided alike on both paths."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from adapter_helpers import run_script

from msprof_py.adapter import backend, foreach, formats, runtime
from msprof_py.adapter.tensors import storage_format
from msprof_py.device import SimulatedNpu, TaskKind, TaskLog, costmodel


def _kernels(log: TaskLog, start: int) -> list:
    return [t for t in log.tasks[start:] if t.kind is TaskKind.KERNEL]


def _lists(n: int, size: int = 5, dtype: torch.dtype = torch.float32) -> list[list[torch.Tensor]]:
    torch.manual_seed(0)
    return [[torch.randn(size + i % 3, dtype=dtype) for i in range(n)] for _ in range(2)]


def test_in_place_add_over_fifty_tensors_is_three_kernels_of_one_host_op(
    npu: SimulatedNpu, log: TaskLog
) -> None:
    """In place over two lists, op-plugin launches 24 tensors per kernel: 24 + 24 + 2. Each
    kernel's traffic is both lists read and the first written (3 x 4 bytes per element); its
    time the vector cost of those elements and bytes. Values are bitwise the CPU's."""
    a, b = _lists(50)
    npu_a, npu_b = [t.to("npu") for t in a], [t.to("npu") for t in b]
    start = len(log.tasks)
    torch._foreach_add_(npu_a, npu_b, alpha=0.5)
    torch.npu.synchronize()
    torch._foreach_add_(a, b, alpha=0.5)
    assert all(torch.equal(x.cpu(), y) for x, y in zip(npu_a, a, strict=True))
    kernels = _kernels(log, start)
    assert [k.name for k in kernels] == ["aten::_foreach_add_"] * 3
    assert [k.op_type for k in kernels] == ["ForeachAdd"] * 3
    for k, indices in zip(kernels, (range(0, 24), range(24, 48), range(48, 50)), strict=True):
        elements = sum(a[i].numel() for i in indices)
        assert k.bytes == 3 * 4 * elements
        cost = costmodel.vector_cost(
            npu.spec, elements=elements, dtype="float32", bytes_moved=3 * 4 * elements
        )
        assert k.end_ns - k.start_ns == cost.duration_ns


def test_out_of_place_and_one_list_ops_split_by_op_plugins_sizes(
    npu: SimulatedNpu, log: TaskLog
) -> None:
    """Out of place over two lists: 16 per kernel; in place over one list: 48; out of place
    over one list: 24 (``_foreach_sqrt``, two vector instructions per element)."""
    a, b = _lists(40)
    npu_a, npu_b = [t.to("npu") for t in a], [t.to("npu") for t in b]
    cases: list[tuple[Callable[[], object], int, str]] = [
        (lambda: torch._foreach_add(npu_a, npu_b), math.ceil(40 / 16), "ForeachAdd"),
        (lambda: torch._foreach_mul_(npu_a, 2.0), 1, "ForeachMul"),
        (lambda: torch._foreach_sqrt([t.abs() for t in npu_b]), math.ceil(40 / 24), "ForeachSqrt"),
    ]
    for program, expected, op_type in cases:
        start = len(log.tasks)
        program()
        torch.npu.synchronize()
        kernels = [k for k in _kernels(log, start) if k.op_type.startswith("Foreach")]
        assert len(kernels) == expected and {k.op_type for k in kernels} == {op_type}
    out = torch._foreach_add(npu_a, npu_b)  # npu_a was doubled in place above
    assert all(o.device.type == "npu" for o in out)
    assert all(torch.equal(o.cpu(), x * 2.0 + y) for o, x, y in zip(out, a, b, strict=True))


#: (why, op, arguments) of calls the fast route refuses, each for one of its conditions
SLOW: list[tuple[str, str, Callable[[], tuple]]] = [
    ("mixed dtypes", "_foreach_add_.List", lambda: ([_t(3), _t(3, dtype=torch.half)], [_t(3)] * 2)),
    ("an integer dtype", "_foreach_mul_.Scalar", lambda: ([_t(3, dtype=torch.int32)] * 2, 2)),
    ("float64", "_foreach_mul_.Scalar", lambda: ([_t(3, dtype=torch.float64)], 2.0)),
    ("not dense", "_foreach_add_.List", lambda: ([_t(4, 4)[:, ::2]], [_t(4, 2)])),
    ("sizes differ at an index", "_foreach_add_.List", lambda: ([_t(4, 2)], [_t(2)])),
    ("strides differ at an index", "_foreach_add_.List", lambda: ([_t(4, 4)], [_t(4, 4).t()])),
]


def _t(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.ones(*shape, dtype=dtype, device="npu")


def _call(op: str, args: tuple, kwargs: dict | None = None) -> object:
    packet, _, overload = op.partition(".")
    return getattr(getattr(torch.ops.aten, packet), overload or "default")(*args, **kwargs or {})


@pytest.mark.parametrize(("why", "op", "args"), SLOW, ids=[s[0] for s in SLOW])
def test_calls_off_the_fast_route_run_one_op_per_tensor(
    npu: SimulatedNpu, log: TaskLog, why: str, op: str, args: Callable[[], tuple]
) -> None:
    lists = args()
    start = len(log.tasks)
    _call(op, lists)
    torch.npu.synchronize()
    kernels = _kernels(log, start)
    assert not any(k.name.startswith("aten::_foreach_") for k in kernels)
    assert len(kernels) >= len(lists[0])  # at least one per tensor (casts may add some)


#: (op, args, kwargs, fast): the cases the compiled and the Python router must agree on
ROUTES: list[tuple[str, Callable[[], tuple], dict, bool]] = [
    ("_foreach_add_.List", lambda: ([_t(3), _t(2, 2)], [_t(3), _t(2, 2)]), {"alpha": 2}, True),
    ("_foreach_add_.List", lambda: ([_t(3)], [_t(3)]), {"alpha": 0.5}, True),
    ("_foreach_mul_.Scalar", lambda: ([_t(3, dtype=torch.float16)], 0.5), {}, True),
    ("_foreach_mul_.Scalar", lambda: ([_t(3)], 1j), {}, False),
    ("_foreach_mul_.Scalar", lambda: ([_t(3, dtype=torch.int32)], 2), {}, False),
    ("_foreach_add_.ScalarList", lambda: ([_t(3), _t(3)], [1.0, 2]), {}, True),
    ("_foreach_add_.ScalarList", lambda: ([_t(3), _t(3)], [1.0, 2j]), {}, False),
    ("_foreach_mul_.Tensor", lambda: ([_t(3), _t(3)], _t(())), {}, True),
    ("_foreach_mul_.Tensor", lambda: ([_t(3), _t(3)], _t(2)), {}, False),
    ("_foreach_lerp_.Scalar", lambda: ([_t(3)], [_t(3)], 0.1), {}, True),
    ("_foreach_addcdiv_.Scalar", lambda: ([_t(3)], [_t(3)], [_t(3)], 0.1), {}, True),
    ("_foreach_addcdiv_.Scalar", lambda: ([_t(3)], [_t(3)], [_t(4)], 0.1), {}, False),
    ("_foreach_norm.Scalar", lambda: ([_t(3), _t(5)],), {}, True),
    ("_foreach_norm.Scalar", lambda: ([_t(3), _t(5)], 1), {}, True),
    ("_foreach_norm.Scalar", lambda: ([_t(3), _t(5)], float("inf")), {}, False),
    ("_foreach_norm.Scalar", lambda: ([_t(3), _t(5)],), {"ord": 3.0}, False),
    ("_foreach_copy_", lambda: ([_t(3)], [_t(3)]), {"non_blocking": False}, True),
    *[(op, case, {}, False) for _, op, case in SLOW],
]


@pytest.mark.parametrize(("op", "args", "kwargs", "fast"), ROUTES)
def test_the_compiled_router_agrees_with_the_python_one(
    npu: SimulatedNpu, op: str, args: Callable[[], tuple], kwargs: dict, fast: bool
) -> None:
    values = args()
    name, _, overload = op.partition(".")
    assert foreach.fast_route(values, kwargs, f"aten::{name}") is fast
    if backend.NATIVE is not None:
        assert backend.NATIVE.foreach_route(f"aten::{name}", overload, values, kwargs) is fast


def test_formats_are_settled_per_list_index(npu: SimulatedNpu) -> None:
    """Index 0 (a FRACTAL_Z conv weight and its plain gradient) works in FRACTAL_Z, which the
    gradient is converted to for good; index 1 (a 4-D tensor in no private format) stays
    ND, as one ``add_`` per tensor would leave it. A fresh output takes its index's format."""
    state = runtime.STATE
    assert state is not None
    weight, grad = _t(8, 4, 3, 3), _t(8, 4, 3, 3)
    other, other_grad = _t(1, 4, 2, 2), _t(1, 4, 2, 2)
    backend.transdata(state, weight, formats.FRACTAL_Z)
    out = torch._foreach_add([weight, other], [grad, other_grad])
    assert storage_format(out[0]) is not None and storage_format(out[0])[0] == formats.FRACTAL_Z
    assert storage_format(out[1]) is None
    torch._foreach_add_([weight, other], [grad, other_grad])
    assert storage_format(grad)[0] == formats.FRACTAL_Z  # type: ignore[index]
    assert storage_format(other) is None and storage_format(other_grad) is None


@pytest.mark.parametrize("native", ["1", "0"], ids=["compiled path", "Python path"])
@pytest.mark.parametrize(
    ("device", "expected"),
    [("ascend910b", "2 ['aten::_foreach_add_']"), ("ascend910a", "30 ['aten::add_']")],
)
def test_chips_before_the_910b_run_foreach_per_tensor(
    device: str, expected: str, native: str
) -> None:
    """op-plugin has no multi-tensor kernels before the A2 generation: on a 910A an in-place
    foreach add over 30 tensors runs as one op and one kernel per tensor, on the 910B as two
    multi-tensor kernels (24 + 6); the same on the compiled and the Python path."""
    result = run_script(
        f"""
        import os
        os.environ["MSPROF_NATIVE"] = "{native}"
        import torch, msprof_py.adapter
        from msprof_py.device import TaskKind, TaskLog
        npu = msprof_py.adapter.install(device="{device}")
        log = TaskLog()
        npu.subscribe(log)
        params = [torch.ones(4, device="npu") for _ in range(30)]
        grads = [torch.ones(4, device="npu") for _ in range(30)]
        start = len(log.tasks)
        torch._foreach_add_(params, grads, alpha=-0.1)
        torch.npu.synchronize()
        kernels = [t for t in log.tasks[start:] if t.kind is TaskKind.KERNEL]
        cpu = torch.ones(4).add_(torch.ones(4), alpha=-0.1)
        assert all(torch.equal(p.cpu(), cpu) for p in params)
        print(len(kernels), sorted({{t.name for t in kernels}}))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[0] == expected


def test_ops_without_an_op_plugin_kernel_run_per_tensor_on_the_910b(
    npu: SimulatedNpu, log: TaskLog
) -> None:
    """op-plugin has no multi-tensor kernel for ``_foreach_mul_.Tensor`` (gradient clipping's
    scaling by a 0-dim tensor) or ``_foreach_clamp_min_``: those take PyTorch's per-tensor loop
    even where the route holds; ``_foreach_mul_.Scalar`` is one kernel."""
    assert not foreach.has_kernel("_foreach_mul_.Tensor")
    assert not foreach.has_kernel("_foreach_add.List_out")
    assert foreach.has_kernel("_foreach_mul_.Scalar") and foreach.has_kernel("_foreach_sqrt_")
    tensors, scale = [_t(4) for _ in range(5)], _t(())
    for program, names in [
        (lambda: torch._foreach_mul_(tensors, scale), {"aten::mul_"}),
        (lambda: torch._foreach_clamp_min_(tensors, 0.5), {"aten::clamp_min_"}),
        (lambda: torch._foreach_mul_(tensors, 0.5), {"aten::_foreach_mul_"}),
    ]:
        start = len(log.tasks)
        program()
        torch.npu.synchronize()
        kernels = _kernels(log, start)
        assert {k.name for k in kernels} == names
        assert len(kernels) == (1 if "aten::_foreach_mul_" in names else len(tensors))
