"""The npu side of the torchvision_npu shim: JPEG decode and VPC tasks on the simulated DVPP.

Values are always computed on the host (PIL, torch CPU ops), exactly as the CPU path computes
them; what the npu backend adds is where the time goes: the compressed bytes' host-to-device
copy, a JPEGD task, VPC tasks, and the result as an npu tensor. Work DVPP cannot do (no
engine on this chip, an image outside the engine's limits, a non-uint8 tensor) runs on the
host, its image copied from and to the device, and is counted in :data:`FALLBACKS`.

DVPP work runs on the DVPP's own stream (:attr:`Dvpp.stream`), not the current one: the
current stream waits for each result by an event (recorded on the DVPP stream after the
task), and the DVPP stream waits for the current stream only when an input image was not
itself made by DVPP. So decoding and resizing the next batch overlaps the current step's
kernels whenever the host submits it before it blocks on the step (``loss.item()``), as the
separate JPEGD/VPC hardware does; a loop that synchronises first sees no overlap.
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
from msprof_py.device.dvpp import Dvpp, DvppError, DvppUnsupportedError, vpc_ns
from msprof_py.device.engine import Stream
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


#: attribute marking an npu image DVPP made (its DVPP stream has it: no wait needed)
_MADE_BY_DVPP = "_msprof_dvpp_image"


def _dvpp_stream(
    state: runtime.AdapterState, engine: Dvpp, inputs: Sequence[torch.Tensor]
) -> Stream:
    """The DVPP stream, made to wait for the current stream's work so far when an input image
    came from elsewhere (an npu op on the current stream, a copy)."""
    stream = engine.stream
    if any(not getattr(t, _MADE_BY_DVPP, False) for t in inputs):
        device = engine.engine
        event = device.create_event(timing=False)
        device.record_event(event, state.stream)
        device.wait_event(stream, event)
    return stream


def _hand_over(state: runtime.AdapterState, engine: Dvpp, outputs: Sequence[torch.Tensor]) -> None:
    """The current stream waits for the DVPP stream's work so far (an event), and the
    ``outputs`` are marked as DVPP's."""
    device = engine.engine
    event = device.create_event(timing=False)
    device.record_event(event, engine.stream)
    device.wait_event(state.stream, event)
    for t in outputs:
        setattr(t, _MADE_BY_DVPP, True)


def decode_to_npu(items: Sequence[bytes | torch.Tensor]) -> list[torch.Tensor]:
    """Decode JPEGs on the npu: one H2D copy of the compressed bytes and one JPEGD task
    (a batch when several) on the DVPP stream; uint8 CHW npu tensors."""
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
        stream = engine.stream  # host bytes in: nothing on the device to wait for
        engine.engine.submit_memcpy(
            stream, CopyKind.H2D, total, pinned=pinned, name="torchvision_npu (H2D)"
        )
        try:
            engine.decode(stream, sizes, nbytes=total, software=software)
        except DvppError as exc:  # outside the decoder's limits: the host decodes
            note_fallback(str(exc))
            pixels = sum(t.numel() for t in decoded)
            engine.engine.submit_memcpy(
                stream, CopyKind.H2D, pixels, pinned=pinned, name="decoded image (H2D)"
            )
        out = [adopt(t, state, "torchvision_npu") for t in decoded]
        _hand_over(state, engine, out)
        return out
    finally:
        state.leave()


#: the acl call of a VPC task of one image, by operation (a batch is one batch call)
VPC_CALLS = {
    "Resize": "acldvppVpcResizeAsync",
    "Crop": "acldvppVpcCropAsync",
    "CropResize": "acldvppVpcCropResizeAsync",
}
VPC_BATCH_CALL = "acldvppVpcBatchCropResizeAsync"


def vpc_run(
    images: Sequence[torch.Tensor],
    op: str,
    in_sizes: Sequence[tuple[int, int]],
    out_sizes: Sequence[tuple[int, int]],
    compute: Callable[[list[torch.Tensor]], list[torch.Tensor]],
) -> list[torch.Tensor]:
    """One VPC task ``op`` over npu images (uint8, CHW each or NCHW batches): ``in_sizes`` and
    ``out_sizes`` are (width, height) per picture (a batch's pictures counted one by one);
    ``compute`` maps the images' host views to the results' host tensors (the CPU path's
    values). A host fallback (D2H, compute, H2D on the current stream) when VPC cannot."""
    state = runtime.state()
    state.enter(f"torchvision_npu::{op}")
    try:
        engine = dvpp()
        srcs = [host_view(t) for t in images]
        try:
            bad = [t.dtype for t in images if t.dtype != torch.uint8 or t.dim() not in (3, 4)]
            if bad:
                raise DvppUnsupportedError(f"VPC takes uint8 CHW images, not {bad[0]}")
            vpc_ns(engine.spec, in_sizes, out_sizes)  # within the limits, before any wait
            stream = _dvpp_stream(state, engine, images)
            call = VPC_BATCH_CALL if len(in_sizes) > 1 else VPC_CALLS.get(op, f"acldvppVpc{op}")
            engine.vpc(stream, op, in_sizes, out_sizes, name=call)
        except DvppError as exc:
            note_fallback(str(exc))
            device = state.npu.engine
            nbytes = sum(t.numel() * t.element_size() for t in images)
            device.submit_memcpy(state.stream, CopyKind.D2H, nbytes, name=f"{op} fallback (D2H)")
            results = compute([s.clone() for s in srcs])
            nbytes = sum(r.numel() * r.element_size() for r in results)
            device.submit_memcpy(state.stream, CopyKind.H2D, nbytes, name=f"{op} fallback (H2D)")
            return [adopt(r.contiguous(), state, "torchvision_npu") for r in results]
        out = [adopt(r.contiguous(), state, "torchvision_npu") for r in compute(srcs)]
        _hand_over(state, engine, out)
        return out
    finally:
        state.leave()
