"""Host ops (SDPA, the recurrent ops) keep their kernel plans per call metadata: a call like
one planned before launches the same kernels without planning again, and anything a planner
reads (shapes, dtypes, scalars, a packed sequence's lengths, the device) plans afresh."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from msprof_py.adapter import host_ops, sdpa
from msprof_py.device import DeviceSpec, SimulatedNpu, TaskLog


@pytest.fixture
def plans(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict]:
    """An empty plan table for the test."""
    table: dict = {}
    monkeypatch.setattr(host_ops, "_PLANS", table)
    yield table


def _kernels(log: TaskLog, start: int) -> list[tuple]:
    """What the device ran from task ``start`` on: (op type, duration, input shapes) of each
    kernel (the task ids and times differ between calls)."""
    return [
        (t.op_type, t.duration_ns, t.input_shapes, t.output_shapes)
        for t in log.tasks[start:]
        if t.op_type not in ("MEMCPY_H2D", "MEMCPY_D2H", "MEMCPY_D2D")
    ]


def _counting(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> list[int]:
    """Count the calls of ``module.name`` (a planner step) in the returned list's length."""
    calls: list[int] = []
    original: Callable = getattr(module, name)

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def _attend(shape: tuple[int, ...], dtype: torch.dtype = torch.float32, **options: object) -> None:
    q, k, v = (torch.randn(shape).to(dtype).to("npu").requires_grad_() for _ in range(3))
    F.scaled_dot_product_attention(q, k, v, **options).sum().backward()  # type: ignore[arg-type]


def test_an_sdpa_call_like_one_before_reuses_its_plan(
    npu: SimulatedNpu, log: TaskLog, plans: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    planned = _counting(monkeypatch, sdpa, "_math")
    start = len(log.tasks)
    _attend((2, 4, 8, 16), is_causal=True)
    first = _kernels(log, start)
    middle = len(log.tasks)
    _attend((2, 4, 8, 16), is_causal=True)
    assert len(planned) == 1 and len(plans) == 1
    assert _kernels(log, middle) == first  # the same kernels, costs and shapes
    assert any(op == "BatchMatMul" for op, *_ in first)
    _attend((2, 4, 8, 16))  # not causal: no mask add, planned again
    _attend((2, 4, 12, 16), is_causal=True)  # another sequence length
    assert len(planned) == 3 and len(plans) == 3


def test_a_replaced_device_spec_plans_afresh(
    npu: SimulatedNpu, log: TaskLog, plans: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same float16 SDPA is one FlashAttentionScore on the 910B, the math path's kernels on
    the 910A: the spec is part of what a plan is kept by."""
    start = len(log.tasks)
    _attend((1, 2, 8, 16), torch.float16)
    on_910b = {op for op, *_ in _kernels(log, start)}
    monkeypatch.setattr(npu, "spec", DeviceSpec.load("ascend910a"))
    middle = len(log.tasks)
    _attend((1, 2, 8, 16), torch.float16)
    on_910a = {op for op, *_ in _kernels(log, middle)}
    assert "FlashAttentionScore" in on_910b and "FlashAttentionScore" not in on_910a
    assert "BatchMatMul" in on_910a


def _packed_lstm(lstm: nn.LSTM, lengths: list[int]) -> None:
    x = torch.randn(max(lengths), len(lengths), 6).to("npu")
    packed = pack_padded_sequence(x, torch.tensor(lengths), enforce_sorted=False)
    with torch.no_grad():
        lstm(packed)


def test_packed_sequences_of_other_lengths_are_planned_again(
    npu: SimulatedNpu, log: TaskLog, plans: dict
) -> None:
    """A packed sequence's ``batch_sizes`` is read by value: two batches of the same shapes
    whose lengths differ ([5, 3, 2] and [5, 4, 1]: batch sizes 3,3,2,1,1 and 3,3,2,2,1) run
    different kernels, and each matches what a fresh plan launches."""
    lstm = nn.LSTM(6, 8).to("npu")
    runs = []
    for lengths in ([5, 3, 2], [5, 4, 1], [5, 3, 2]):
        start = len(log.tasks)
        _packed_lstm(lstm, lengths)
        runs.append(_kernels(log, start))
    assert len(plans) == 2
    assert runs[0] == runs[2] and runs[0] != runs[1]
    plans.clear()
    start = len(log.tasks)
    _packed_lstm(lstm, [5, 4, 1])
    assert _kernels(log, start) == runs[1]
