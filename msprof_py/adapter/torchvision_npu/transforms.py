"""Image transforms as torchvision_npu runs them, without torchvision.

Each transform takes an RGB PIL image, a uint8 CHW CPU tensor, or (npu backend) a uint8 CHW
npu image from :func:`torchvision_npu.decode_jpeg`. Geometry (``Resize``, ``CenterCrop``,
``RandomResizedCrop``) is computed with PIL, as torchvision computes it on PIL images; on an
npu image it is one VPC task on the device. ``ToTensor`` and ``Normalize`` are tensor
arithmetic: on an npu image they run as npu ops (AI Core kernels). The values are the same on
every path.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from PIL import Image

from msprof_py.adapter.torchvision_npu._device import chw_to_pil, pil_to_chw, vpc_apply

Img = Image.Image | torch.Tensor

__all__ = ["CenterCrop", "Compose", "Normalize", "RandomResizedCrop", "Resize", "ToTensor"]


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


def _geometry(
    img: Img,
    op: str,
    out_wh: tuple[int, int],
    in_wh: tuple[int, int],
    pil_op: Callable[[Image.Image], Image.Image],
) -> Img:
    """Apply the PIL operation ``pil_op`` to any image kind; a VPC task for npu images."""
    if isinstance(img, Image.Image):
        return pil_op(img)
    if img.device.type == "npu":
        return vpc_apply(img, op, out_wh, lambda t: pil_to_chw(pil_op(chw_to_pil(t))), in_wh)
    return pil_to_chw(pil_op(chw_to_pil(img)))


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

    def __call__(self, img: Img) -> Img:
        w, h = _size(img)
        out = self.output_size(w, h)
        return _geometry(img, "Resize", out, (w, h), lambda p: p.resize(out, Image.BILINEAR))


def _crop(p: Image.Image, left: int, top: int, w: int, h: int) -> Image.Image:
    return p.crop((left, top, left + w, top + h))


class CenterCrop:
    """Crop the centre (torchvision's rounding: ``round((W - w) / 2)``)."""

    def __init__(self, size: int | Sequence[int]) -> None:
        self.height, self.width = _pair(size)

    def __call__(self, img: Img) -> Img:
        w, h = _size(img)
        if self.width > w or self.height > h:
            raise ValueError(f"CenterCrop: {self.width}x{self.height} is larger than {w}x{h}")
        left = round((w - self.width) / 2.0)
        top = round((h - self.height) / 2.0)
        box = (self.width, self.height)
        return _geometry(img, "Crop", box, box, lambda p: _crop(p, left, top, *box))


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

    def __call__(self, img: Img) -> Img:
        left, top, w, h = self.params(*_size(img))
        out = (self.width, self.height)

        def op(p: Image.Image) -> Image.Image:
            return _crop(p, left, top, w, h).resize(out, Image.BILINEAR)

        return _geometry(img, "CropResize", out, (w, h), op)


class ToTensor:
    """A float CHW tensor in [0, 1] (pixels / 255); an npu image stays on the npu."""

    def __call__(self, img: Img) -> torch.Tensor:
        t = pil_to_chw(img) if isinstance(img, Image.Image) else img
        return t.to(torch.float32).div(255)


class Normalize:
    """``(x - mean) / std`` per channel of a float CHW tensor (on its device)."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        self.mean = list(mean)
        self.std = list(std)

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        mean = torch.tensor(self.mean, dtype=t.dtype).view(-1, 1, 1)
        std = torch.tensor(self.std, dtype=t.dtype).view(-1, 1, 1)
        if t.device.type != "cpu":
            mean, std = mean.to(t.device), std.to(t.device)
        return t.sub(mean).div(std)
