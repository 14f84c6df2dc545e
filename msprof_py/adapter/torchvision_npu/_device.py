"""The npu side of the torchvision_npu shim: JPEG decode and VPC tasks on the simulated DVPP.

Values are always computed on the host (PIL, torch CPU ops), exactly as the CPU path computes
them; what the npu backend adds is where the time goes: the compressed bytes' host-to-device
copy, a JPEGD task, VPC tasks, and the result as an npu tensor. Work DVPP cannot do (no
engine on this chip, an image outside the engine's limits, a non-uint8 tensor) runs on the
host, its image copied from and to the device, and is counted in :data:`FALLBACKS`.
"""

from __future__ import annotations

import io
import warnings
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np
import torch
from PIL import Image

from msprof_py.adapter import runtime
from msprof_py.adapter.copies import is_pinned_host
from msprof_py.adapter.tensors import adopt, host_view
from msprof_py.device.dvpp import Dvpp, DvppError, DvppUnsupportedError
from msprof_py.device.records import CopyKind

#: why an image operation ran on the host instead of DVPP -> how often
FALLBACKS: Counter[str] = Counter()
_WARNED: set[str] = set()


class DvppUnavailableError(RuntimeError):
    """``decode_jpeg(device='npu')`` on a chip without the acl JPEG decoder."""


def dvpp() -> Dvpp:
    """The installed device's DVPP engines."""
    return Dvpp.of(runtime.state().npu.engine)


def note_fallback(reason: str) -> None:
    """Count one host fallback; warn once per reason."""
    FALLBACKS[reason] += 1
    if reason not in _WARNED:
        _WARNED.add(reason)
        warnings.warn(f"torchvision_npu: {reason}; running on the CPU", stacklevel=3)


def pil_decode(data: bytes) -> Image.Image:
    """Decode JPEG bytes to an RGB PIL image (the CPU path)."""
    with Image.open(io.BytesIO(data)) as img:
        return img.convert("RGB")


def pil_to_chw(img: Image.Image) -> torch.Tensor:
    """A uint8 CHW CPU tensor of an RGB PIL image."""
    return torch.from_numpy(np.array(img, dtype=np.uint8)).permute(2, 0, 1).contiguous()


def chw_to_pil(t: torch.Tensor) -> Image.Image:
    """An RGB PIL image of a uint8 CHW CPU tensor."""
    return Image.fromarray(t.permute(1, 2, 0).contiguous().numpy(), mode="RGB")


def _as_bytes(data: bytes | torch.Tensor) -> tuple[bytes, bool]:
    if isinstance(data, torch.Tensor):
        return data.numpy().tobytes(), is_pinned_host(data)
    return bytes(data), False


def decode_to_npu(items: Sequence[bytes | torch.Tensor]) -> list[torch.Tensor]:
    """Decode JPEGs on the npu: one H2D copy of the compressed bytes and one JPEGD task
    (a batch when several) on the current stream; uint8 CHW npu tensors."""
    state = runtime.state()
    engine = dvpp()
    if not engine.spec.jpegd:
        name = state.npu.spec.name
        raise DvppUnavailableError(
            f"{name} ({state.npu.spec.soc_version}) has no acl JPEG decoder (Atlas training "
            "products); decode on the CPU: decode_jpeg(data) or set_image_backend('PIL')"
        )
    state.enter("torchvision_npu::decode_jpeg")
    try:
        decoded, software, total, pinned = [], False, 0, True
        for item in items:
            data, is_pinned = _as_bytes(item)
            total += len(data)
            pinned = pinned and is_pinned
            with Image.open(io.BytesIO(data)) as img:
                software = software or bool(
                    img.info.get("progressive") or img.info.get("progression")
                )
                decoded.append(pil_to_chw(img.convert("RGB")))
        sizes = [(int(t.shape[2]), int(t.shape[1])) for t in decoded]
        engine.engine.submit_memcpy(
            state.stream, CopyKind.H2D, total, pinned=pinned, name="torchvision_npu (H2D)"
        )
        try:
            engine.decode(state.stream, sizes, nbytes=total, software=software)
        except DvppError as exc:  # outside the decoder's limits: the host decodes
            note_fallback(str(exc))
            pixels = sum(t.numel() for t in decoded)
            engine.engine.submit_memcpy(
                state.stream, CopyKind.H2D, pixels, pinned=pinned, name="decoded image (H2D)"
            )
        return [adopt(t, state, "torchvision_npu") for t in decoded]
    finally:
        state.leave()


def vpc_apply(
    t: torch.Tensor,
    op: str,
    out_size: tuple[int, int],
    compute: Callable[[torch.Tensor], torch.Tensor],
    in_size: tuple[int, int] | None = None,
) -> torch.Tensor:
    """Run ``compute`` (host uint8 CHW -> host uint8 CHW, the CPU path's values) for the npu
    image ``t`` as one VPC task ``op`` reading ``in_size`` (width, height; default the whole
    image) and writing ``out_size``; a host fallback (D2H, compute, H2D) when VPC cannot."""
    state = runtime.state()
    state.enter(f"torchvision_npu::{op}")
    try:
        src = host_view(t)
        width, height = int(t.shape[-1]), int(t.shape[-2])
        try:
            if t.dtype != torch.uint8 or t.dim() != 3:
                raise DvppUnsupportedError(f"VPC takes uint8 CHW images, not {t.dtype}")
            dvpp().vpc(state.stream, op, [in_size or (width, height)], [out_size])
        except DvppError as exc:
            note_fallback(str(exc))
            engine = state.npu.engine
            nbytes = t.numel() * t.element_size()
            engine.submit_memcpy(state.stream, CopyKind.D2H, nbytes, name=f"{op} fallback (D2H)")
            out = compute(src.clone())
            nbytes = out.numel() * out.element_size()
            engine.submit_memcpy(state.stream, CopyKind.H2D, nbytes, name=f"{op} fallback (H2D)")
            return adopt(out.contiguous(), state, "torchvision_npu")
        return adopt(compute(src).contiguous(), state, "torchvision_npu")
    finally:
        state.leave()
