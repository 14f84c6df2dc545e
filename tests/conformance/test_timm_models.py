"""timm image models (``pretrained=False``) train on npu exactly as on CPU."""

from __future__ import annotations

import pytest
import torch
from model_helpers import compare_training
from optional import LazyModule, needs
from torch import nn
from torch.nn import functional as F

from msprof_py.device import SimulatedNpu

pytestmark = needs("timm")
timm = LazyModule("timm")

#: name -> extra create_model arguments that keep the model small at 32x32 inputs
MODELS: dict[str, dict] = {
    "resnet18": {},
    "vit_tiny_patch16_224": {"img_size": 32, "patch_size": 8},
    "convnext_atto": {},
    "efficientnet_b0": {},
}


def _batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    return [
        (torch.randn(2, 3, 32, 32, generator=gen), torch.randint(0, 10, (2,), generator=gen))
        for _ in range(3)
    ]


def _loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    images, labels = batch
    return F.cross_entropy(model(images), labels)


def _build(name: str) -> nn.Module:
    return timm.create_model(name, pretrained=False, num_classes=10, **MODELS[name])


@pytest.mark.parametrize("optimizer", ["adamw-foreach", "sgd-momentum"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_trains_bitwise_like_cpu(npu: SimulatedNpu, name: str, optimizer: str) -> None:
    result = compare_training(lambda: _build(name), _batches(), _loss, optimizer)
    assert result.problems() == []


def test_fused_adamw_on_resnet(npu: SimulatedNpu) -> None:
    result = compare_training(lambda: _build("resnet18"), _batches(), _loss, "adamw-fused")
    assert result.problems() == []


def test_vit_without_fused_attention(npu: SimulatedNpu) -> None:
    from timm.layers import config

    fused = config._USE_FUSED_ATTN
    config.set_fused_attn(False)
    try:
        build = lambda: _build("vit_tiny_patch16_224")  # noqa: E731
        result = compare_training(build, _batches(), _loss)
    finally:
        config._USE_FUSED_ATTN = fused
    assert result.problems() == []


def _ema_training(device: str) -> list[torch.Tensor]:
    from timm.utils import ModelEmaV3

    torch.manual_seed(0)
    model = _build("resnet18").to(device)
    ema = ModelEmaV3(model, decay=0.9)  # deep-copies the model on its device, npu generator
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for batch in _batches():
        images, labels = batch
        loss = F.cross_entropy(model(images.to(device)), labels.to(device))
        loss.backward()
        opt.step()
        opt.zero_grad()
        ema.update(model)
    return [t.detach().cpu() for t in ema.module.state_dict().values()]


def test_model_ema_tracks_the_model_bitwise_like_cpu(npu: SimulatedNpu) -> None:
    """timm's ModelEmaV3 deep-copies the model already on the device and builds a generator
    for it (both failed on npu: a segfault in the storage copy, then no npu generator)."""
    for cpu, on_npu in zip(_ema_training("cpu"), _ema_training("npu"), strict=True):
        assert torch.equal(cpu, on_npu)
