"""An op without a CPU kernel fails on npu with one line, naming a supported alternative."""

from __future__ import annotations

import pytest
import torch

from msprof_py.device import SimulatedNpu


def test_an_op_without_cpu_kernel_raises_one_line_with_the_alternative(npu: SimulatedNpu) -> None:
    x = torch.randn(8, device="npu")
    with pytest.raises(NotImplementedError) as info:
        torch.ops.aten._fused_dropout(x, 0.5)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("aten::_fused_dropout is not supported on the npu device")
    assert "runs ops through their CPU kernels" in message
    assert message.endswith("use torch.nn.functional.dropout instead")


def test_the_fused_lstm_cell_names_the_modules_that_work(npu: SimulatedNpu) -> None:
    gates = torch.randn(2, 16, device="npu")
    cx = torch.randn(2, 4, device="npu")
    with pytest.raises(NotImplementedError, match=r"^aten::_thnn_fused_lstm_cell .*LSTMCell"):
        torch.ops.aten._thnn_fused_lstm_cell(gates, gates, cx)


def test_an_op_without_known_alternative_still_gets_one_line(npu: SimulatedNpu) -> None:
    with pytest.raises(NotImplementedError) as info:
        torch.ops.aten.cudnn_grid_sampler(
            torch.randn(1, 1, 4, 4, device="npu"), torch.randn(1, 4, 4, 2, device="npu")
        )
    message = str(info.value)
    assert "\n" not in message and "aten::cudnn_grid_sampler" in message
    assert "use " not in message and "Could not run" not in message
