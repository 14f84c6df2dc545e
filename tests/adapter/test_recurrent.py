"""Recurrent modules on npu: bitwise the CPU's values and gradients, torch_npu's kernels."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from msprof_py.device import SimulatedNpu, TaskLog, TaskType, costmodel


class Packed(nn.Module):
    """Runs ``rnn`` on a padded batch packed with ``pack_padded_sequence`` (unsorted lengths)."""

    def __init__(self, rnn: nn.Module) -> None:
        super().__init__()
        self.rnn = rnn
        self.lengths = torch.tensor([3, 5, 2])

    def forward(self, x: torch.Tensor) -> tuple:
        packed = pack_padded_sequence(x, self.lengths, enforce_sorted=False)
        out, hidden = self.rnn(packed)
        padded, _ = pad_packed_sequence(out)
        return padded, hidden


def _seq(batch_first: bool = False) -> Callable[[torch.Generator], torch.Tensor]:
    return lambda g: torch.randn((3, 5, 6) if batch_first else (5, 3, 6), generator=g)


def _cell_input(g: torch.Generator) -> torch.Tensor:
    return torch.randn(3, 6, generator=g)


CASES = {
    "rnn_tanh": (lambda: nn.RNN(6, 8), _seq()),
    "rnn_relu_2layer_bidir_batch_first": (
        lambda: nn.RNN(6, 8, 2, nonlinearity="relu", bidirectional=True, batch_first=True),
        _seq(True),
    ),
    "lstm": (lambda: nn.LSTM(6, 8), _seq()),
    "lstm_2layer_bidir_batch_first": (
        lambda: nn.LSTM(6, 8, 2, bidirectional=True, batch_first=True),
        _seq(True),
    ),
    "lstm_proj": (lambda: nn.LSTM(6, 8, 2, proj_size=5), _seq()),
    "lstm_no_bias": (lambda: nn.LSTM(6, 8, bias=False), _seq()),
    "gru_2layer_bidir": (lambda: nn.GRU(6, 8, 2, bidirectional=True), _seq()),
    "packed_lstm_bidir": (lambda: Packed(nn.LSTM(6, 8, bidirectional=True)), _seq()),
    "packed_gru": (lambda: Packed(nn.GRU(6, 8, 2)), _seq()),
    "packed_rnn": (lambda: Packed(nn.RNN(6, 8)), _seq()),
    "lstm_cell": (lambda: nn.LSTMCell(6, 8), _cell_input),
    "gru_cell": (lambda: nn.GRUCell(6, 8), _cell_input),
    "rnn_cell_tanh": (lambda: nn.RNNCell(6, 8), _cell_input),
    "rnn_cell_relu_no_bias": (
        lambda: nn.RNNCell(6, 8, bias=False, nonlinearity="relu"),
        _cell_input,
    ),
}


def _flat(result: object) -> list[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result]
    return [t for r in result for t in _flat(r)]  # type: ignore[union-attr]


def _train(make: Callable[[], nn.Module], data: Callable, device: str) -> list[torch.Tensor]:
    """Two Adam steps; every output, input gradient, parameter gradient and parameter."""
    torch.manual_seed(0)
    model = make().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(1)
    seen: list[torch.Tensor] = []
    for _ in range(2):
        x = data(g).to(device).requires_grad_()
        outputs = _flat(model(x))
        loss = sum((o * (i + 1)).pow(2).mean() for i, o in enumerate(outputs))
        optimizer.zero_grad()
        loss.backward()  # type: ignore[union-attr]
        optimizer.step()
        assert x.grad is not None
        seen += [*outputs, x.grad, *(p.grad for p in model.parameters())]
    seen += list(model.parameters())
    return [t.detach().cpu() for t in seen]


@pytest.mark.parametrize("case", CASES)
def test_recurrent_training_is_bitwise_equal_to_cpu(npu: SimulatedNpu, case: str) -> None:
    make, data = CASES[case]
    cpu = _train(make, data, "cpu")
    on_npu = _train(make, data, "npu")
    assert len(cpu) == len(on_npu)
    for a, b in zip(cpu, on_npu, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a, b), (a - b).abs().max()


def test_nn_rnn_differed_only_by_the_op_order_now_mirrored(npu: SimulatedNpu) -> None:
    # Wider than the cases above: the CPU's whole-sequence input GEMM rounds differently from
    # the step-by-step one ATen uses on other devices, which made nn.RNN differ before.
    torch.manual_seed(0)
    rnn = nn.RNN(37, 64, 2)
    x = torch.randn(9, 5, 37)
    on_npu = copy.deepcopy(rnn).to("npu")
    assert torch.equal(rnn(x)[0], on_npu(x.to("npu"))[0].cpu())


def test_inference_mode_and_no_grad_match_cpu(npu: SimulatedNpu) -> None:
    torch.manual_seed(0)
    lstm = nn.LSTM(6, 8, 2)
    on_npu = copy.deepcopy(lstm).to("npu")
    x = torch.randn(5, 3, 6)
    with torch.inference_mode():
        expected = lstm(x)[0]
        got = on_npu(x.to("npu"))[0]
    assert torch.equal(expected, got.cpu())
    with torch.no_grad():
        got = on_npu(x.to("npu"))[0]
    assert not got.requires_grad and torch.equal(expected, got.cpu())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", ["lstm", "gru_2layer_bidir", "rnn_tanh", "lstm_cell", "gru_cell"])
def test_autocast_behaves_like_cpu_autocast(
    npu: SimulatedNpu, case: str, dtype: torch.dtype
) -> None:
    make, data = CASES[case]
    torch.manual_seed(0)
    model = make()
    on_npu = copy.deepcopy(model).to("npu")
    x = data(torch.Generator().manual_seed(1))
    xn = x.to("npu").requires_grad_()
    x.requires_grad_()
    try:
        with torch.autocast("cpu", dtype=dtype):
            expected = _flat(model(x))
    except RuntimeError as exc:  # this CPU's oneDNN has no such LSTM: npu says the same
        failure = pytest.raises(RuntimeError, match=str(exc).split(".")[0])
        with failure, torch.autocast("npu", dtype=dtype):
            on_npu(xn)
        return
    with torch.autocast("npu", dtype=dtype):
        got = _flat(on_npu(xn))
    for a, b in zip(expected, got, strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b.cpu())
    sum(o.float().sum() for o in expected).backward()  # type: ignore[union-attr]
    sum(o.float().sum() for o in got).backward()  # type: ignore[union-attr]
    assert x.grad is not None and xn.grad is not None
    assert torch.equal(x.grad, xn.grad.cpu())
    for p, q in zip(model.parameters(), on_npu.parameters(), strict=True):
        assert p.grad is not None and q.grad is not None and torch.equal(p.grad, q.grad.cpu())


def test_modifying_an_output_in_place_fails_the_backward_as_on_cpu(npu: SimulatedNpu) -> None:
    lstm = nn.LSTM(6, 8).to("npu")
    out, _ = lstm(torch.randn(5, 3, 6, device="npu"))
    out.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


# ---- device tasks ------------------------------------------------------------------------


def _kernels(log: TaskLog, start: int) -> list:
    return [t for t in log.tasks[start:] if t.kind.value == "kernel"]


def test_lstm_forward_is_one_dynamic_rnn_per_layer_and_direction(
    npu: SimulatedNpu, log: TaskLog
) -> None:
    t_steps, batch, inp, hidden = 5, 3, 16, 32
    lstm = nn.LSTM(inp, hidden, num_layers=2, bidirectional=True).to("npu")
    x = torch.randn(t_steps, batch, inp, device="npu")
    h0 = torch.zeros(4, batch, hidden, device="npu")
    start = len(log.tasks)
    with torch.no_grad():
        lstm(x, (h0, h0))
    kernels = _kernels(log, start)
    assert [k.op_type for k in kernels] == ["DynamicRNN"] * 4
    assert all(k.name == "aten::lstm" and k.task_type == TaskType.MIX_AIC for k in kernels)
    rows, gates = t_steps * batch, 4 * hidden
    for k, layer_in in zip(kernels, (inp, inp, 2 * hidden, 2 * hidden), strict=True):
        # [x_t, h_{t-1}] @ [W_ih; W_hh]^T for every step
        assert k.flops == 2 * rows * gates * (layer_in + hidden)
        # x, W_ih, W_hh, both biases, h0, c0, y, h_n, c_n (fp32, nothing saved without grad)
        elements = rows * layer_in + gates * (layer_in + hidden) + 2 * gates
        elements += 4 * batch * hidden + rows * hidden
        assert k.bytes == elements * 4
        assert k.input_shapes == ((rows, layer_in), (gates, layer_in), (gates, hidden))
        # one input GEMM for all steps, then per step a hidden GEMM followed by the gate math
        step = costmodel.matmul_cost(npu.spec, batch, gates, hidden, dtype="float32")
        whole = costmodel.matmul_cost(npu.spec, rows, gates, layer_in, dtype="float32")
        assert k.duration_ns >= npu.spec.dispatch.device_sched_ns + round(
            whole.cube_ns + t_steps * step.cube_ns
        )
    assert kernels[2].start_ns >= kernels[1].end_ns  # in order on one stream


def test_lstm_backward_is_one_dynamic_rnn_grad_per_layer_and_direction(
    npu: SimulatedNpu, log: TaskLog
) -> None:
    lstm = nn.LSTM(16, 32, num_layers=2).to("npu")
    out, _ = lstm(torch.randn(5, 3, 16, device="npu", requires_grad=True))
    start = len(log.tasks)
    out.backward(torch.ones_like(out))
    grads = [k for k in _kernels(log, start) if k.op_type == "DynamicRNNGrad"]
    assert [k.name for k in grads] == ["aten::lstm_backward"] * 2
    # dh per step, dx, dW_ih and dW_hh: twice the forward GEMMs (layer 2 first)
    rows, gates = 15, 128
    assert [k.flops for k in grads] == [4 * rows * gates * (32 + 32), 4 * rows * gates * (16 + 32)]


def test_gru_is_dynamic_gru_v2_and_rnn_runs_per_step_kernels(
    npu: SimulatedNpu, log: TaskLog
) -> None:
    x = torch.randn(4, 2, 8, device="npu")
    start = len(log.tasks)
    with torch.no_grad():
        nn.GRU(8, 16).to("npu")(x)
    (gru,) = [k for k in _kernels(log, start) if k.name == "aten::gru"]
    assert gru.op_type == "DynamicGRUV2" and gru.flops == 2 * 8 * 48 * (8 + 16)
    start = len(log.tasks)
    with torch.no_grad():
        nn.RNN(8, 16).to("npu")(x)
    rnn = [k for k in _kernels(log, start) if k.name == "aten::rnn_tanh"]
    assert [k.op_type for k in rnn] == ["MatMul", "MatMul", "Add", "Tanh"] * 4
    assert [k.flops for k in rnn[:2]] == [2 * 2 * 16 * 8, 2 * 2 * 16 * 16]
    assert rnn[0].input_shapes == ((16,), (2, 8), (8, 16))


def test_lstm_cell_is_two_matmuls_and_the_fused_gate_kernel(
    npu: SimulatedNpu, log: TaskLog
) -> None:
    cell = nn.LSTMCell(8, 16).to("npu")
    x = torch.randn(4, 8, device="npu")
    h = torch.zeros(4, 16, device="npu")
    start = len(log.tasks)
    with torch.no_grad():
        cell(x, (h, h))
    kernels = _kernels(log, start)
    assert [k.op_type for k in kernels] == ["MatMul", "MatMul", "ThnnFusedLstmCell"]
    assert [k.flops for k in kernels[:2]] == [2 * 4 * 64 * 8, 2 * 4 * 64 * 16]
    assert kernels[2].task_type == TaskType.AI_VECTOR_CORE


def test_training_holds_the_saved_gate_activations_in_device_memory(npu: SimulatedNpu) -> None:
    lstm = nn.LSTM(16, 32).to("npu")
    x = torch.randn(5, 3, 16, device="npu")
    with torch.no_grad():
        base = torch.npu.memory_allocated()
        out = lstm(x)
        plain = torch.npu.memory_allocated() - base
    del out
    base = torch.npu.memory_allocated()
    out = lstm(x)
    held = torch.npu.memory_allocated() - base
    # i, f, g, o of 15 rows x 32 units, plus the cell state and tanh(c): fp32, rounded blocks
    saved = (15 * 4 * 32 + 2 * 15 * 32) * 4
    block = npu.spec.allocation.caching_round_bytes
    assert held - plain == -(-saved // block) * block
    del out
    assert torch.npu.memory_allocated() == base  # freed with the graph
