"""torch_npu.npu_lstm: nn.LSTM's numbers (same weights), one DynamicRNN kernel per call."""

from __future__ import annotations

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from msprof_py.adapter.compile_cache import CompileCache
from msprof_py.device import SimulatedNpu, TaskLog

T, B, I, H = 6, 3, 5, 7  # noqa: E741 - the LSTM sizes


def _weights(lstm: torch.nn.LSTM) -> tuple[torch.Tensor, torch.Tensor]:
    """nn.LSTM's weights in npu_lstm's layout: (I + H, 4H) and the summed bias."""
    w = torch.cat([lstm.weight_ih_l0, lstm.weight_hh_l0], 1).t().contiguous()
    return w.detach(), (lstm.bias_ih_l0 + lstm.bias_hh_l0).detach()


def _lstm() -> torch.nn.LSTM:
    torch.manual_seed(0)
    return torch.nn.LSTM(I, H)


def test_values_equal_nn_lstm_on_cpu(npu: SimulatedNpu, log: TaskLog) -> None:
    import torch_npu

    lstm = _lstm()
    x = torch.randn(T, B, I)
    h0, c0 = torch.randn(1, B, H), torch.randn(1, B, H)
    with torch.no_grad():
        ref, (hn, cn) = lstm(x, (h0, c0))
        w, b = _weights(lstm)
        out = torch_npu.npu_lstm(x.npu(), w.npu(), b.npu(), None, h0.npu(), c0.npu())
    assert len(out) == 8 and all(o.shape == (T, B, H) for o in out)
    y, h, c, i, j, f, o, tanhc = (t.cpu() for t in out)
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(h[-1], hn[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(c[-1], cn[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(o * tanhc, h)  # h = o * tanh(c)
    assert (i > 0).all() and (i < 1).all() and (f > 0).all() and (j.abs() < 1).all()
    kernels = [t for t in log.tasks if t.kind.value == "kernel"]
    assert [t.op_type for t in kernels] == ["DynamicRNN"]
    assert kernels[0].input_shapes[0] == (T * B, I)


def test_the_kernel_costs_what_nn_lstm_costs_on_the_npu(npu: SimulatedNpu, log: TaskLog) -> None:
    import torch_npu

    lstm = _lstm()
    x = torch.randn(T, B, I).npu()
    h0 = torch.zeros(1, B, H).npu()
    with torch.no_grad():
        w, b = _weights(lstm)
        torch_npu.npu_lstm(x, w.npu(), b.npu(), None, h0, h0)
        lstm.npu()(x, (h0, h0))
    fused = [t for t in log.tasks if t.op_type == "DynamicRNN"]
    assert len(fused) == 2
    assert fused[0].end_ns - fused[0].start_ns == fused[1].end_ns - fused[1].start_ns
    assert fused[0].flops == fused[1].flops == 2 * T * B * 4 * H * (I + H)


def test_a_masked_sequence_equals_a_packed_nn_lstm(npu: SimulatedNpu) -> None:
    import torch_npu

    lstm = _lstm()
    lengths = [6, 4, 2]
    x = torch.randn(T, B, I)
    mask = (torch.arange(T)[:, None] < torch.tensor(lengths)[None, :]).float()
    for t, n in enumerate(lengths):
        x[n:, t] = 0.0
    h0 = torch.zeros(1, B, H)
    with torch.no_grad():
        packed, (hn, cn) = lstm(pack_padded_sequence(x, lengths))
        ref, _ = pad_packed_sequence(packed, total_length=T)
        w, b = _weights(lstm)
        y, h, c, *_ = torch_npu.npu_lstm(
            x.npu(), w.npu(), b.npu(), mask.npu(), h0.npu(), h0.npu(), flag_seq=True
        )
    torch.testing.assert_close(y.cpu(), ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(h.cpu()[-1], hn[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(c.cpu()[-1], cn[0], rtol=1e-5, atol=1e-6)


def test_gradients_equal_nn_lstm_and_one_grad_kernel(npu: SimulatedNpu, log: TaskLog) -> None:
    import torch_npu

    lstm = _lstm()
    x = torch.randn(T, B, I)
    ref, _ = lstm(x.requires_grad_())
    ref.sum().backward()
    w, b = _weights(lstm)
    xn = x.detach().npu().requires_grad_()
    wn, bn = w.npu().requires_grad_(), b.npu().requires_grad_()
    h0 = torch.zeros(1, B, H).npu()
    y, *_ = torch_npu.npu_lstm(xn, wn, bn, None, h0, h0)
    y.sum().backward()
    torch.testing.assert_close(xn.grad.cpu(), x.grad, rtol=1e-5, atol=1e-6)
    w_grad = torch.cat([lstm.weight_ih_l0.grad, lstm.weight_hh_l0.grad], 1).t()
    torch.testing.assert_close(wn.grad.cpu(), w_grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(bn.grad.cpu(), lstm.bias_ih_l0.grad, rtol=1e-5, atol=1e-5)
    types = [t.op_type for t in log.tasks if t.op_type.startswith("DynamicRNN")]
    assert types == ["DynamicRNN", "DynamicRNNGrad"]


def test_jit_mode_compiles_again_for_each_new_length(
    npu: SimulatedNpu, cache: CompileCache, log: TaskLog
) -> None:
    import torch_npu

    cache.set_mode(True)
    w = torch.zeros(I + H, 4 * H).npu()
    b = torch.zeros(4 * H).npu()
    h0 = torch.zeros(1, B, H).npu()
    with torch.no_grad():
        for steps in (4, 9, 4, 9, 12):
            torch_npu.npu_lstm(torch.zeros(steps, B, I).npu(), w, b, None, h0, h0)
    compiles = [h.name for h in log.host if h.name == "compile DynamicRNN"]
    assert len(compiles) == 3  # lengths 4, 9, 12


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"num_layers": 2}, "one unidirectional layer"), ({"bidirectional": True}, "one")],
)
def test_unsupported_arguments_are_one_line(npu: SimulatedNpu, kwargs: dict, match: str) -> None:
    import torch_npu

    x = torch.zeros(2, 1, I).npu()
    h = torch.zeros(1, 1, H).npu()
    with pytest.raises(ValueError, match=match):
        torch_npu.npu_lstm(x, torch.zeros(I + H, 4 * H).npu(), None, None, h, h, **kwargs)


def test_a_wrong_weight_shape_names_the_expected_one(npu: SimulatedNpu) -> None:
    import torch_npu

    x = torch.zeros(2, 1, I).npu()
    h = torch.zeros(1, 1, H).npu()
    with pytest.raises(ValueError, match=r"\(12, 28\)"):
        torch_npu.npu_lstm(x, torch.zeros(4 * H, I + H).npu(), None, None, h, h)
