"""The ``torch.nn`` module zoo on npu: outputs, input grads and three SGD steps equal CPU's."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from model_helpers import OPTIMIZERS, same_values
from torch import nn

from msprof_py.device import SimulatedNpu


def _x(*shape: int) -> Callable[[], torch.Tensor]:
    return lambda: torch.randn(*shape)


def _ids(high: int, *shape: int) -> Callable[[], torch.Tensor]:
    return lambda: torch.randint(0, high, shape)


#: name -> (module factory, input factories); the loss is the sum of every floating output
MODULES: dict[str, tuple[Callable[[], nn.Module], tuple[Callable[[], torch.Tensor], ...]]] = {
    # convolution
    "Conv1d": (lambda: nn.Conv1d(3, 4, 3, padding=1), (_x(2, 3, 9),)),
    "Conv2d": (lambda: nn.Conv2d(3, 4, 3, stride=2, padding=1), (_x(2, 3, 8, 8),)),
    "Conv2d-groups": (lambda: nn.Conv2d(4, 8, 3, groups=2, dilation=2), (_x(2, 4, 9, 9),)),
    "Conv3d": (lambda: nn.Conv3d(2, 3, 3), (_x(1, 2, 5, 5, 5),)),
    "ConvTranspose1d": (lambda: nn.ConvTranspose1d(3, 2, 3, stride=2), (_x(2, 3, 5),)),
    "ConvTranspose2d": (lambda: nn.ConvTranspose2d(3, 2, 3, stride=2), (_x(2, 3, 5, 5),)),
    "ConvTranspose3d": (lambda: nn.ConvTranspose3d(2, 2, 2), (_x(1, 2, 3, 3, 3),)),
    "Unfold": (lambda: nn.Unfold(2), (_x(2, 3, 4, 4),)),
    "PixelShuffle": (lambda: nn.PixelShuffle(2), (_x(1, 8, 3, 3),)),
    # normalisation
    "BatchNorm1d": (lambda: nn.BatchNorm1d(5), (_x(4, 5),)),
    "BatchNorm2d": (lambda: nn.BatchNorm2d(3), (_x(4, 3, 5, 5),)),
    "BatchNorm3d": (lambda: nn.BatchNorm3d(2), (_x(2, 2, 3, 3, 3),)),
    "LayerNorm": (lambda: nn.LayerNorm(6), (_x(3, 4, 6),)),
    "GroupNorm": (lambda: nn.GroupNorm(2, 4), (_x(3, 4, 5),)),
    "InstanceNorm2d": (lambda: nn.InstanceNorm2d(3, affine=True), (_x(2, 3, 4, 4),)),
    "LocalResponseNorm": (lambda: nn.LocalResponseNorm(2), (_x(2, 4, 3, 3),)),
    "RMSNorm": (lambda: nn.RMSNorm(6), (_x(3, 6),)),
    # pooling
    "MaxPool2d": (lambda: nn.MaxPool2d(2), (_x(2, 3, 6, 6),)),
    "MaxPool1d": (lambda: nn.MaxPool1d(3, stride=2), (_x(2, 3, 9),)),
    "AvgPool2d": (lambda: nn.AvgPool2d(3, stride=2, padding=1), (_x(2, 3, 6, 6),)),
    "AdaptiveAvgPool2d": (lambda: nn.AdaptiveAvgPool2d((2, 3)), (_x(2, 3, 7, 7),)),
    "AdaptiveMaxPool2d": (lambda: nn.AdaptiveMaxPool2d(2), (_x(2, 3, 5, 5),)),
    "LPPool2d": (lambda: nn.LPPool2d(2, 2), (_x(2, 3, 4, 4),)),
    "Upsample-bilinear": (
        lambda: nn.Upsample(scale_factor=2, mode="bilinear"),
        (_x(1, 2, 3, 3),),
    ),
    "Upsample-nearest": (lambda: nn.Upsample(scale_factor=2), (_x(1, 2, 3, 3),)),
    # embedding
    "Embedding": (lambda: nn.Embedding(10, 4, padding_idx=0), (_ids(10, 3, 5),)),
    "EmbeddingBag": (lambda: nn.EmbeddingBag(10, 4, mode="mean"), (_ids(10, 3, 5),)),
    # linear and activations
    "Linear": (lambda: nn.Linear(5, 3), (_x(4, 5),)),
    "Bilinear": (lambda: nn.Bilinear(3, 4, 2), (_x(5, 3), _x(5, 4))),
    "GELU-tanh": (lambda: nn.GELU(approximate="tanh"), (_x(4, 5),)),
    "SiLU": (lambda: nn.SiLU(), (_x(4, 5),)),
    "Mish": (lambda: nn.Mish(), (_x(4, 5),)),
    "PReLU": (lambda: nn.PReLU(3), (_x(2, 3, 4),)),
    "Softmax2d": (lambda: nn.Softmax2d(), (_x(2, 3, 4, 4),)),
    "LogSoftmax": (lambda: nn.LogSoftmax(dim=-1), (_x(4, 5),)),
    "Hardswish": (lambda: nn.Hardswish(), (_x(4, 5),)),
    "Softplus": (lambda: nn.Softplus(beta=2), (_x(4, 5),)),
    "GLU": (lambda: nn.GLU(), (_x(4, 6),)),
    # transformer
    "MultiheadAttention": (
        lambda: nn.MultiheadAttention(8, 2, batch_first=True),
        (_x(2, 5, 8), _x(2, 5, 8), _x(2, 5, 8)),
    ),
    "TransformerEncoderLayer": (
        lambda: nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True),
        (_x(2, 5, 8),),
    ),
    "TransformerDecoderLayer": (
        lambda: nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, batch_first=True),
        (_x(2, 5, 8), _x(2, 4, 8)),
    ),
    "Transformer": (
        lambda: nn.Transformer(8, 2, 1, 1, 16, dropout=0.0, batch_first=True),
        (_x(2, 5, 8), _x(2, 4, 8)),
    ),
    # dropout (same generator as CPU)
    "Dropout": (lambda: nn.Dropout(0.3), (_x(4, 5),)),
    "Dropout2d": (lambda: nn.Dropout2d(0.3), (_x(2, 4, 3, 3),)),
    "AlphaDropout": (lambda: nn.AlphaDropout(0.3), (_x(4, 5),)),
    # losses
    "CrossEntropyLoss": (
        lambda: nn.CrossEntropyLoss(label_smoothing=0.1),
        (_x(4, 5), _ids(5, 4)),
    ),
    "NLLLoss": (lambda: nn.NLLLoss(), (_x(4, 5), _ids(5, 4))),
    "MSELoss": (lambda: nn.MSELoss(), (_x(4, 5), _x(4, 5))),
    "L1Loss": (lambda: nn.L1Loss(), (_x(4, 5), _x(4, 5))),
    "SmoothL1Loss": (lambda: nn.SmoothL1Loss(), (_x(4, 5), _x(4, 5))),
    "HuberLoss": (lambda: nn.HuberLoss(delta=0.5), (_x(4, 5), _x(4, 5))),
    "BCEWithLogitsLoss": (lambda: nn.BCEWithLogitsLoss(), (_x(4, 5), lambda: torch.rand(4, 5))),
    "KLDivLoss": (lambda: nn.KLDivLoss(reduction="batchmean"), (_x(4, 5), _x(4, 5))),
    "CosineEmbeddingLoss": (
        lambda: nn.CosineEmbeddingLoss(),
        (_x(4, 5), _x(4, 5), lambda: torch.tensor([1, -1, 1, -1])),
    ),
    "MarginRankingLoss": (
        lambda: nn.MarginRankingLoss(),
        (_x(4), _x(4), lambda: torch.tensor([1.0, -1.0, 1.0, -1.0])),
    ),
    "TripletMarginLoss": (lambda: nn.TripletMarginLoss(), (_x(4, 5), _x(4, 5), _x(4, 5))),
    "CTCLoss": (
        lambda: nn.CTCLoss(),
        (
            lambda: torch.randn(6, 2, 5).log_softmax(-1),
            lambda: torch.randint(1, 5, (2, 3)),
            lambda: torch.tensor([6, 6]),
            lambda: torch.tensor([3, 2]),
        ),
    ),
}


def _floating_outputs(out: object) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out] if out.is_floating_point() else []
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _floating_outputs(o)]
    return []


def _run(module: nn.Module, inputs: list[torch.Tensor], device: str) -> tuple[list, list]:
    torch.manual_seed(1)
    xs = [x.detach().to(device).requires_grad_(x.is_floating_point()) for x in inputs]
    opt = OPTIMIZERS["sgd-momentum"](module.parameters()) if list(module.parameters()) else None
    outputs, grads = [], []
    for _ in range(3):
        out = _floating_outputs(module(*xs))
        sum(o.sum() for o in out).backward()
        outputs += [o.detach().cpu() for o in out]
        grads += [x.grad.cpu().clone() for x in xs if x.grad is not None]
        for x in xs:
            x.grad = None
        if opt is not None:
            opt.step()
            opt.zero_grad()
    return outputs, grads


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return same_values(a, b)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_matches_cpu(npu: SimulatedNpu, name: str) -> None:
    factory, input_factories = MODULES[name]
    torch.manual_seed(0)
    cpu_module = factory()
    npu_module = copy.deepcopy(cpu_module).to("npu")
    inputs = [make() for make in input_factories]
    out_cpu, grad_cpu = _run(cpu_module, inputs, "cpu")
    out_npu, grad_npu = _run(npu_module, inputs, "npu")
    assert len(out_cpu) == len(out_npu) and len(grad_cpu) == len(grad_npu)
    assert all(_same(a, b) for a, b in zip(out_cpu, out_npu, strict=True)), "outputs differ"
    assert all(_same(a, b) for a, b in zip(grad_cpu, grad_npu, strict=True)), "grads differ"
    for (key, p_cpu), p_npu in zip(
        cpu_module.state_dict().items(), npu_module.state_dict().values(), strict=True
    ):
        assert _same(p_cpu, p_npu.cpu()), f"{key} differs after three steps"
