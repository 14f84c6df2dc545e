"""Image transforms as torchvision_npu runs them, without torchvision.

Each transform takes an RGB PIL image, a uint8 CHW CPU tensor, or (npu backend) a uint8 CHW
npu image from :func:`torchvision_npu.decode_jpeg`; the picture transforms (``Resize``,
``CenterCrop``, ``RandomResizedCrop``, ``ColorJitter``) also take a batch: a uint8 NCHW
tensor (one set of random parameters for the whole batch, as torchvision applies to batched
tensors) or a list of images (each image its own parameters, drawn in order, as applying the
transform image by image draws them). They are computed with PIL, as torchvision computes
them on PIL images; on npu images each call is one VPC task on the DVPP stream, a batch or a
list of several pictures one batch task (``acldvppVpcBatchCropResizeAsync``, which reaches
the engine's cap on one call). ``ColorJitter`` runs on VPC by assumption: torchvision_npu
lists it as accelerated, the sources do not say on which engine, so VPC's rate (input pixels)
is used. ``ToTensor`` and ``Normalize`` are tensor arithmetic: on an npu image they run as
npu ops (AI Core kernels). The values are the same on every path.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image, ImageEnhance

from msprof_py.adapter.torchvision_npu._device import chw_to_pil, pil_to_chw, vpc_run

Img = Image.Image | torch.Tensor

__all__ = [
    "CenterCrop",
    "ColorJitter",
    "Compose",
    "Normalize",
    "RandomResizedCrop",
    "Resize",
    "ToTensor",
    "adjust_hue",
]


def _size(img: Img) -> tuple[int, int]:
    """(width, height)."""
    if isinstance(img, Image.Image):
        return img.size
    return int(img.shape[-1]), int(img.shape[-2])


def _pair(size: int | Sequence[int]) -> tuple[int, int]:
    """(height, width) of a torchvision size argument."""
    if isinstance(size, int):
        return size, size
    return int(size[0]), int(size[1])


@dataclass(frozen=True)
class Plan:
    """One picture's operation: the VPC op, output and input (width, height), and the PIL
    function that computes it."""

    op: str
    out_wh: tuple[int, int]
    in_wh: tuple[int, int]
    pil_op: Callable[[Image.Image], Image.Image]

    def on_chw(self, t: torch.Tensor) -> torch.Tensor:
        """The operation on a uint8 CHW host tensor."""
        return pil_to_chw(self.pil_op(chw_to_pil(t)))


def _is_npu(img: object) -> bool:
    return isinstance(img, torch.Tensor) and img.device.type == "npu"


def apply(planner: Callable[[int, int], Plan], img: Img | Sequence[Img]) -> Img | list[Img]:
    """Apply the picture transform whose :class:`Plan` ``planner(width, height)`` draws to
    a PIL image, a CHW or NCHW tensor, or a list of them (see the module)."""
    if isinstance(img, (list, tuple)):
        plans = [planner(*_size(x)) for x in img]
        if img and all(_is_npu(x) and x.dim() == 3 for x in img):
            return vpc_run(
                list(img),
                _batch_op(plans),
                [p.in_wh for p in plans],
                [p.out_wh for p in plans],
                lambda srcs: [p.on_chw(s) for p, s in zip(plans, srcs, strict=True)],
            )
        return [_apply_plan(p, x) for p, x in zip(plans, img, strict=True)]
    return _apply_plan(planner(*_size(img)), img)


def _batch_op(plans: Sequence[Plan]) -> str:
    ops = {p.op for p in plans}
    return ops.pop() if len(ops) == 1 else "CropResize"


def _apply_plan(plan: Plan, img: Img) -> Img:
    if isinstance(img, Image.Image):
        return plan.pil_op(img)
    if img.dtype != torch.uint8 or img.dim() not in (3, 4):
        raise TypeError(
            f"{plan.op}: takes PIL images or uint8 CHW/NCHW tensors, got a {img.dim()}-d "
            f"{img.dtype} tensor (apply it before ToTensor)"
        )
    if img.dim() == 4:  # a batch: the same operation on every picture, one task
        n = int(img.shape[0])

        def stacked(srcs: list[torch.Tensor]) -> list[torch.Tensor]:
            return [torch.stack([plan.on_chw(x) for x in srcs[0]])]

        if img.device.type == "npu":
            return vpc_run([img], plan.op, [plan.in_wh] * n, [plan.out_wh] * n, stacked)[0]
        return stacked([img])[0]
    if img.device.type == "npu":
        return vpc_run([img], plan.op, [plan.in_wh], [plan.out_wh], lambda s: [plan.on_chw(s[0])])[
            0
        ]
    return plan.on_chw(img)


class Compose:
    """Apply transforms in order."""

    def __init__(self, transforms: Sequence[Callable[[object], object]]) -> None:
        self.transforms = list(transforms)

    def __call__(self, img: object) -> object:
        for t in self.transforms:
            img = t(img)
        return img


class Resize:
    """Resize with bilinear filtering; an int ``size`` matches the shorter side (torchvision's
    rule: the longer side is ``int(size * long / short)``)."""

    def __init__(self, size: int | Sequence[int]) -> None:
        self.size = size

    def output_size(self, width: int, height: int) -> tuple[int, int]:
        """(width, height) of the result for a ``width`` x ``height`` image."""
        if not isinstance(self.size, int):
            h, w = _pair(self.size)
            return w, h
        short, long = sorted((width, height))
        new_long = int(self.size * long / short)
        return (self.size, new_long) if width <= height else (new_long, self.size)

    def plan(self, width: int, height: int) -> Plan:
        """The operation on a ``width`` x ``height`` picture."""
        out = self.output_size(width, height)
        return Plan("Resize", out, (width, height), lambda p: p.resize(out, Image.BILINEAR))

    def __call__(self, img: Img | Sequence[Img]) -> Img | list[Img]:
        return apply(self.plan, img)


def _crop(p: Image.Image, left: int, top: int, w: int, h: int) -> Image.Image:
    return p.crop((left, top, left + w, top + h))


class CenterCrop:
    """Crop the centre (torchvision's rounding: ``round((W - w) / 2)``)."""

    def __init__(self, size: int | Sequence[int]) -> None:
        self.height, self.width = _pair(size)

    def plan(self, width: int, height: int) -> Plan:
        """The operation on a ``width`` x ``height`` picture (it reads only the box)."""
        if self.width > width or self.height > height:
            raise ValueError(
                f"CenterCrop: {self.width}x{self.height} is larger than {width}x{height}"
            )
        left = round((width - self.width) / 2.0)
        top = round((height - self.height) / 2.0)
        box = (self.width, self.height)
        return Plan("Crop", box, box, lambda p: _crop(p, left, top, *box))

    def __call__(self, img: Img | Sequence[Img]) -> Img | list[Img]:
        return apply(self.plan, img)


class RandomResizedCrop:
    """Crop a random area (``scale`` of the image, aspect in ``ratio``) and resize it
    (bilinear); the crop is drawn from torch's default generator."""

    def __init__(
        self,
        size: int | Sequence[int],
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (3 / 4, 4 / 3),
    ) -> None:
        self.height, self.width = _pair(size)
        self.scale = scale
        self.ratio = ratio

    def params(self, width: int, height: int) -> tuple[int, int, int, int]:
        """(left, top, crop width, crop height): ten tries at a random area and aspect, else
        the centre crop of the aspect clamped into ``ratio``."""
        area = width * height
        log_lo, log_hi = math.log(self.ratio[0]), math.log(self.ratio[1])
        for _ in range(10):
            target = area * torch.empty(1).uniform_(self.scale[0], self.scale[1]).item()
            aspect = math.exp(torch.empty(1).uniform_(log_lo, log_hi).item())
            w = round(math.sqrt(target * aspect))
            h = round(math.sqrt(target / aspect))
            if 0 < w <= width and 0 < h <= height:
                top = int(torch.randint(0, height - h + 1, (1,)).item())
                left = int(torch.randint(0, width - w + 1, (1,)).item())
                return left, top, w, h
        aspect = width / height
        if aspect < min(self.ratio):
            w, h = width, round(width / min(self.ratio))
        elif aspect > max(self.ratio):
            w, h = round(height * max(self.ratio)), height
        else:
            w, h = width, height
        return (width - w) // 2, (height - h) // 2, w, h

    def plan(self, width: int, height: int) -> Plan:
        """A random crop of a ``width`` x ``height`` picture, resized (it reads the crop)."""
        left, top, w, h = self.params(width, height)
        out = (self.width, self.height)

        def op(p: Image.Image) -> Image.Image:
            return _crop(p, left, top, w, h).resize(out, Image.BILINEAR)

        return Plan("CropResize", out, (w, h), op)

    def __call__(self, img: Img | Sequence[Img]) -> Img | list[Img]:
        return apply(self.plan, img)


def _factor_range(value: float | Sequence[float], name: str) -> tuple[float, float] | None:
    """``value`` as torchvision reads it: a number ``v`` is ``[max(0, 1 - v), 1 + v]``, a pair
    is the range; None when it leaves the picture unchanged (0, or the range ``(1, 1)``)."""
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"ColorJitter: {name} must be non-negative, got {value}")
        lo, hi = max(0.0, 1.0 - value), 1.0 + value
    else:
        lo, hi = float(value[0]), float(value[1])
        if not 0 <= lo <= hi:
            raise ValueError(f"ColorJitter: {name} range must be 0 <= low <= high, got {value}")
    return None if lo == hi == 1.0 else (lo, hi)


def _hue_range(value: float | Sequence[float]) -> tuple[float, float] | None:
    if isinstance(value, (int, float)):
        lo, hi = -float(value), float(value)
    else:
        lo, hi = float(value[0]), float(value[1])
    if not -0.5 <= lo <= hi <= 0.5:
        raise ValueError(f"ColorJitter: hue must lie in [-0.5, 0.5], got {value}")
    return None if lo == hi == 0.0 else (lo, hi)


def adjust_hue(img: Image.Image, factor: float) -> Image.Image:
    """Shift the hue by ``factor`` of a turn (in [-0.5, 0.5]): the H channel of the HSV
    picture moves by ``factor x 255`` modulo 256, as uint8 arithmetic wraps."""
    if not -0.5 <= factor <= 0.5:
        raise ValueError(f"adjust_hue: factor must lie in [-0.5, 0.5], got {factor}")
    h, s, v = img.convert("HSV").split()
    shifted = (np.asarray(h, dtype=np.uint8).astype(np.int16) + int(factor * 255)) % 256
    hue = Image.fromarray(shifted.astype(np.uint8), "L")
    return Image.merge("HSV", (hue, s, v)).convert(img.mode)


class ColorJitter:
    """Random brightness, contrast, saturation and hue, in a random order (torchvision's
    parameters: factors drawn uniformly in each range, the order from ``torch.randperm(4)``,
    then the four factors in that fixed sequence)."""

    def __init__(
        self,
        brightness: float | Sequence[float] = 0,
        contrast: float | Sequence[float] = 0,
        saturation: float | Sequence[float] = 0,
        hue: float | Sequence[float] = 0,
    ) -> None:
        self.brightness = _factor_range(brightness, "brightness")
        self.contrast = _factor_range(contrast, "contrast")
        self.saturation = _factor_range(saturation, "saturation")
        self.hue = _hue_range(hue)

    def params(self) -> tuple[list[int], list[float | None]]:
        """The order of the four adjustments and their factors (None: not applied)."""
        order = [int(i) for i in torch.randperm(4)]
        factors: list[float | None] = []
        for rng in (self.brightness, self.contrast, self.saturation, self.hue):
            factors.append(None if rng is None else torch.empty(1).uniform_(*rng).item())
        return order, factors

    def plan(self, width: int, height: int) -> Plan:
        """The adjustments of one picture (VPC reads and writes the whole picture)."""
        order, factors = self.params()
        enhancers = (ImageEnhance.Brightness, ImageEnhance.Contrast, ImageEnhance.Color)

        def op(p: Image.Image) -> Image.Image:
            for i in order:
                f = factors[i]
                if f is None:
                    continue
                p = adjust_hue(p, f) if i == 3 else enhancers[i](p).enhance(f)
            return p

        return Plan("ColorJitter", (width, height), (width, height), op)

    def __call__(self, img: Img | Sequence[Img]) -> Img | list[Img]:
        return apply(self.plan, img)


class ToTensor:
    """A float CHW tensor in [0, 1] (pixels / 255); an npu image stays on the npu."""

    def __call__(self, img: Img | Sequence[Img]) -> torch.Tensor | list[torch.Tensor]:
        if isinstance(img, (list, tuple)):
            return [self(x) for x in img]  # type: ignore[misc]
        t = pil_to_chw(img) if isinstance(img, Image.Image) else img
        return t.to(torch.float32).div(255)


class Normalize:
    """``(x - mean) / std`` per channel of a float CHW tensor (on its device)."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        self.mean = list(mean)
        self.std = list(std)

    def __call__(self, t: torch.Tensor | Sequence[torch.Tensor]) -> torch.Tensor | list:
        if isinstance(t, (list, tuple)):
            return [self(x) for x in t]
        mean = torch.tensor(self.mean, dtype=t.dtype).view(-1, 1, 1)
        std = torch.tensor(self.std, dtype=t.dtype).view(-1, 1, 1)
        if t.device.type != "cpu":
            mean, std = mean.to(t.device), std.to(t.device)
        return t.sub(mean).div(std)
