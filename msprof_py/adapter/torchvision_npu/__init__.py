"""The ``torchvision_npu`` import shim: image decode and transforms on the simulated DVPP.

``import torchvision_npu`` (after ``msprof_py.adapter.install()``) resolves here through the
import hook that serves ``torch_npu``. It needs no torchvision: it works on PIL images, bytes
and tensors. ``set_image_backend('npu')`` makes :func:`default_loader` decode on the npu (a
JPEGD task) and the transforms of :mod:`torchvision_npu.transforms` that torchvision_npu
accelerates run as VPC tasks on npu images; ``'PIL'`` (the default) keeps everything on the
CPU. Values are the CPU path's in both cases; only the device timeline differs.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import torch
from PIL import Image

from msprof_py.adapter.torchvision_npu import transforms
from msprof_py.adapter.torchvision_npu._device import (
    FALLBACKS,
    DvppUnavailableError,
    decode_to_npu,
    pil_decode,
    pil_to_chw,
)

__version__ = "0.1+msprof"
BACKENDS = ("PIL", "npu")
_backend = ["PIL"]

__all__ = [
    "BACKENDS",
    "FALLBACKS",
    "DvppUnavailableError",
    "decode_jpeg",
    "default_loader",
    "get_image_backend",
    "patch_torchvision",
    "set_image_backend",
    "transforms",
]


def set_image_backend(backend: str) -> None:
    """Choose where images are decoded and transformed: ``'npu'`` (DVPP) or ``'PIL'``."""
    if backend not in BACKENDS:
        raise ValueError(f"image backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    _backend[0] = backend


def get_image_backend() -> str:
    """The image backend :func:`set_image_backend` chose (``'PIL'`` by default)."""
    return _backend[0]


def decode_jpeg(
    data: bytes | torch.Tensor | Sequence[bytes | torch.Tensor], device: str | torch.device = "cpu"
) -> torch.Tensor | list[torch.Tensor]:
    """Decode JPEG bytes (or a uint8 tensor of them, or a list: one batch) to uint8 CHW RGB.

    ``device='npu'`` decodes on the JPEGD engine (a batch in one task over its channels);
    ``'cpu'`` decodes with PIL. The values are the same."""
    batch = isinstance(data, (list, tuple))
    items = list(data) if batch else [data]
    if torch.device(device).type == "npu":
        out = decode_to_npu(items)  # type: ignore[arg-type]
    else:
        out = [pil_to_chw(pil_decode(_raw(item))) for item in items]  # type: ignore[arg-type]
    return out if batch else out[0]


def _raw(item: bytes | torch.Tensor) -> bytes:
    return item.numpy().tobytes() if isinstance(item, torch.Tensor) else bytes(item)


def default_loader(path: str | Path) -> Image.Image | torch.Tensor:
    """Load an image file: an RGB PIL image, or with the npu backend (JPEG files on a chip
    with JPEGD) a uint8 CHW npu tensor."""
    path = Path(path)
    if get_image_backend() == "npu" and path.suffix.lower() in (".jpg", ".jpeg"):
        from msprof_py.adapter.torchvision_npu._device import dvpp, note_fallback

        if dvpp().spec.jpegd:
            return decode_to_npu([path.read_bytes()])[0]
        note_fallback("this chip has no acl JPEG decoder (JPEGD)")
    with Image.open(path) as img:
        return img.convert("RGB")


def patch_torchvision(torchvision: ModuleType) -> None:
    """Make ``torchvision.set_image_backend('npu')`` choose this shim's npu backend, as
    importing the real torchvision_npu does: ``'npu'`` is kept here (torchvision's own
    backend stays as it was), any other name goes to torchvision's function and sets this
    shim back to ``'PIL'``; ``torchvision.get_image_backend()`` answers ``'npu'`` while it
    is chosen. Patching twice is a no-op."""
    original_set = torchvision.set_image_backend
    if getattr(original_set, "_msprof_npu", False):
        return
    original_get = torchvision.get_image_backend

    def set_backend(backend: str) -> None:
        if backend == "npu":
            set_image_backend("npu")
            return
        original_set(backend)
        set_image_backend("PIL")

    def get_backend() -> str:
        return "npu" if get_image_backend() == "npu" else original_get()

    set_backend._msprof_npu = True  # type: ignore[attr-defined]
    set_backend.__doc__ = original_set.__doc__
    get_backend.__doc__ = original_get.__doc__
    torchvision.set_image_backend = set_backend  # type: ignore[attr-defined]
    torchvision.get_image_backend = get_backend  # type: ignore[attr-defined]


# torchvision is not imported here (on this index it does not load against the CPU torch):
# patched when the script imported it first, as `import torchvision; import torchvision_npu`
if hasattr(sys.modules.get("torchvision"), "set_image_backend"):
    patch_torchvision(sys.modules["torchvision"])
