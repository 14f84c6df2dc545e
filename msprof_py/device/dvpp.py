"""DVPP, the media engines of an Ascend chip: JPEG decode (JPEGD) and resize/crop (VPC).

Each engine is a pool of channels on the device timeline, next to the AI Cores and DMA
engines. A task holds channels for a time set by the image's pixels and the engine's rate:
the rates are quoted at 1080p per channel (JPEGD 128 FPS on 310/310P, VPC 360 FPS on 310P),
so one channel decodes ``fps_1080p x 1920 x 1080`` pixels per second, and the channel count is
the documented cap over the per-channel rate (310: 256 / 128 = 2 JPEGD channels; 310P:
2048 / 128 = 16 JPEGD, 4320 / 360 = 12 VPC). A batch task spreads over up to every channel
(the batch APIs reach the cap on one channel). VPC time scales with the *input* pixels
(8K -> 4K runs at 22.5 FPS = 360 / 16 on one channel).

A preset describes its chip in an optional ``[dvpp]`` section (see :data:`FIELDS`); a spec
without one has no DVPP, and every image operation stays on the host CPU.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from msprof_py.device.engine import Engine, Stream
from msprof_py.device.errors import DeviceError
from msprof_py.device.records import TaskKind, TaskRecord, TaskType
from msprof_py.device.spec import DeviceSpec, SpecError

#: pixels of one 1080p frame, the size the engines' rates are quoted at
PIXELS_1080P = 1920 * 1080


class DvppError(DeviceError):
    """A DVPP request the engine cannot serve."""


class DvppUnsupportedError(DvppError):
    """The chip has no such DVPP engine (e.g. no acl JPEG decoder on Atlas training chips)."""


class DvppLimitError(DvppError):
    """An image outside an engine's documented limits (size, format)."""


@dataclass(frozen=True)
class DvppSpec:
    """The DVPP engines of one chip (all rates per channel, at 1080p)."""

    jpegd: bool = False
    jpegd_channels: int = 0
    jpegd_fps_1080p: float = 0.0
    #: decode in software (streams the hardware does not take, e.g. progressive JPEG)
    software_fps_1080p: float = 0.0
    jpeg_min_side: int = 32
    jpeg_max_side: int = 8192
    vpc_channels: int = 0
    vpc_fps_1080p: float = 0.0
    vpc_min_side: int = 16
    vpc_max_side: int = 4096
    #: output buffer strides: width aligned to ``width_align``, height to ``height_align``
    width_align: int = 16
    height_align: int = 16

    @property
    def has_vpc(self) -> bool:
        """True when the chip has a VPC engine modelled."""
        return self.vpc_channels > 0

    @property
    def jpegd_cap_fps_1080p(self) -> float:
        """1080p frames per second with every JPEGD channel busy."""
        return self.jpegd_channels * self.jpegd_fps_1080p

    @property
    def vpc_cap_fps_1080p(self) -> float:
        """1080p frames per second with every VPC channel busy."""
        return self.vpc_channels * self.vpc_fps_1080p


def _int(minimum: int) -> Callable[[Any], int]:
    def conv(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise TypeError(f"must be an integer >= {minimum}")
        return v

    return conv


def _rate(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise TypeError("must be a non-negative number of frames per second")
    return float(v)


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise TypeError("must be true or false")
    return v


#: the ``[dvpp]`` fields of a spec file and their converters
FIELDS: dict[str, Callable[[Any], Any]] = {
    "jpegd": _bool,
    "jpegd_channels": _int(0),
    "jpegd_fps_1080p": _rate,
    "software_fps_1080p": _rate,
    "jpeg_min_side": _int(1),
    "jpeg_max_side": _int(1),
    "vpc_channels": _int(0),
    "vpc_fps_1080p": _rate,
    "vpc_min_side": _int(1),
    "vpc_max_side": _int(1),
    "width_align": _int(1),
    "height_align": _int(1),
}


def parse_section(
    table: Any, origin: str, default_source: str | None = None
) -> tuple[DvppSpec, dict[str, str]]:
    """Validate a ``[dvpp]`` table: the spec and each field's source (``dvpp.X`` keys).

    Fields left out take :class:`DvppSpec`'s defaults; a field without a source (in a preset,
    where ``default_source`` is None) is an error, as in the other sections."""
    if not isinstance(table, Mapping):
        raise SpecError(f"{origin}: [dvpp] must be a table")
    unknown = sorted(set(table) - set(FIELDS))
    if unknown:
        raise SpecError(f"{origin}: unknown field 'dvpp.{unknown[0]}'")
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for key, raw in table.items():
        dotted = f"dvpp.{key}"
        source = default_source
        if isinstance(raw, Mapping) and "value" in raw:
            source = raw.get("source", default_source)
            raw = raw["value"]
        if not source:
            raise SpecError(f"{origin}: field '{dotted}' has no source (presets must cite one)")
        try:
            values[key] = FIELDS[key](raw)
        except TypeError as exc:
            raise SpecError(f"{origin}: field '{dotted}' {exc}, got {raw!r}") from None
        sources[dotted] = str(source)
    spec = DvppSpec(**values)
    if spec.jpegd and (spec.jpegd_channels < 1 or spec.jpegd_fps_1080p <= 0):
        raise SpecError(f"{origin}: field 'dvpp.jpegd' needs jpegd_channels and jpegd_fps_1080p")
    if spec.vpc_channels and spec.vpc_fps_1080p <= 0:
        raise SpecError(f"{origin}: field 'dvpp.vpc_fps_1080p' is needed with vpc_channels")
    for engine in ("jpeg", "vpc"):
        if getattr(spec, f"{engine}_min_side") > getattr(spec, f"{engine}_max_side"):
            raise SpecError(f"{origin}: field 'dvpp.{engine}_min_side' exceeds {engine}_max_side")
    return spec, sources


def dvpp_spec(spec: DeviceSpec) -> DvppSpec:
    """The DVPP engines of ``spec`` (no engines when its file has no ``[dvpp]`` section)."""
    table = spec.raw.get("dvpp") if spec.raw else None
    if table is None:
        return DvppSpec()
    return parse_section(table, spec.origin or spec.name, spec.origin or "spec")[0]


def _align(n: int, to: int) -> int:
    return -(-n // to) * to


def _check_size(width: int, height: int, low: int, high: int, what: str) -> None:
    if not (low <= width <= high and low <= height <= high):
        raise DvppLimitError(
            f"{what}: image {width}x{height} is outside {low}x{low} to {high}x{high}"
        )


# ---- costs --------------------------------------------------------------------------------


def jpegd_output(d: DvppSpec, width: int, height: int) -> tuple[int, int, int]:
    """(width stride, height stride, bytes) of JPEGD's YUV420SP output for an image: the
    strides aligned as the spec says, the buffer ``wStride x hStride x 3 / 2`` bytes."""
    w_stride = _align(width, d.width_align)
    h_stride = max(_align(height, d.height_align), d.jpeg_min_side)
    return w_stride, h_stride, w_stride * h_stride * 3 // 2


def check_jpegd(d: DvppSpec, width: int, height: int, name: str = "JPEGD") -> None:
    """Raise unless the chip's JPEG decoder takes a ``width`` x ``height`` image."""
    if not d.jpegd:
        raise DvppUnsupportedError(f"{name}: this chip has no acl JPEG decoder (JPEGD)")
    _check_size(width, height, d.jpeg_min_side, d.jpeg_max_side, name)


def jpegd_ns(
    d: DvppSpec,
    sizes: Sequence[tuple[int, int]],
    *,
    software: bool = False,
) -> tuple[int, int]:
    """(duration ns, channels) of decoding the images ``sizes`` ((width, height) each) in one
    task: the pixels over the rate of ``min(len(sizes), channels)`` channels; ``software``
    (streams the hardware rejects) decodes on one channel at the software rate."""
    for w, h in sizes:
        check_jpegd(d, w, h)
    pixels = sum(w * h for w, h in sizes)
    if software:
        channels, fps = 1, d.software_fps_1080p
        if fps <= 0:
            raise DvppUnsupportedError("JPEGD: this chip has no software JPEG decode path")
    else:
        channels, fps = max(1, min(len(sizes), d.jpegd_channels)), d.jpegd_fps_1080p
    return round(pixels * 1e9 / (channels * fps * PIXELS_1080P)), channels


def check_vpc(d: DvppSpec, width: int, height: int, name: str = "VPC") -> None:
    """Raise unless the chip's VPC takes a ``width`` x ``height`` image (input or output)."""
    if not d.has_vpc:
        raise DvppUnsupportedError(f"{name}: this chip has no VPC engine modelled")
    _check_size(width, height, d.vpc_min_side, d.vpc_max_side, name)


def vpc_ns(
    d: DvppSpec,
    inputs: Sequence[tuple[int, int]],
    outputs: Sequence[tuple[int, int]],
) -> tuple[int, int]:
    """(duration ns, channels) of one VPC task (resize/crop) from ``inputs`` to ``outputs``
    (one (width, height) per image each): the input pixels over ``min(n, channels)``
    channels' rate."""
    if len(inputs) != len(outputs):
        raise ValueError("VPC: one output size per input image")
    for w, h in (*inputs, *outputs):
        check_vpc(d, w, h)
    pixels = sum(w * h for w, h in inputs)
    channels = max(1, min(len(inputs), d.vpc_channels))
    return round(pixels * 1e9 / (channels * d.vpc_fps_1080p * PIXELS_1080P)), channels


# ---- tasks on an engine -------------------------------------------------------------------


class Dvpp:
    """The DVPP engines of one simulated device: submits JPEGD and VPC tasks to its engine.

    The channels are engine pools (``"jpegd"``, ``"vpc"``), so tasks on several streams share
    them as tasks share AI Cores. :attr:`stream` is the DVPP's own queue (the media engines
    are hardware apart from the AI Cores): work submitted there runs alongside the compute
    streams, ordered against them only by the events its callers record and wait for."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.spec = dvpp_spec(engine.spec)
        self._stream: Stream | None = None
        if self.spec.jpegd:
            engine.add_pool("jpegd", self.spec.jpegd_channels)
        if self.spec.has_vpc:
            engine.add_pool("vpc", self.spec.vpc_channels)

    @property
    def stream(self) -> Stream:
        """The DVPP's own stream (made on first use)."""
        if self._stream is None:
            self._stream = self.engine.create_stream()
        return self._stream

    @classmethod
    def of(cls, engine: Engine) -> Dvpp:
        """The engine's DVPP (made on first use)."""
        found = getattr(engine, "_dvpp", None)
        if found is None:
            found = cls(engine)
            engine._dvpp = found  # type: ignore[attr-defined]
        return found

    def decode(
        self,
        stream: Stream,
        sizes: Sequence[tuple[int, int]],
        *,
        nbytes: int = 0,
        software: bool = False,
        name: str = "acldvppJpegDecodeAsync",
    ) -> TaskRecord:
        """One JPEGD task decoding ``sizes`` (one image, or a batch) on ``stream``;
        ``nbytes``: the compressed input."""
        duration, channels = jpegd_ns(self.spec, sizes, software=software)
        out = sum(jpegd_output(self.spec, w, h)[2] for w, h in sizes)
        attrs: dict[str, object] = {
            "engine": "JPEGD",
            "images": len(sizes),
            "channels": channels,
            "pixels": sum(w * h for w, h in sizes),
            "output_bytes": out,
            "software": software,
        }
        return self.engine.submit_unit_task(
            stream,
            "jpegd",
            channels,
            duration,
            kind=TaskKind.DVPP,
            task_type=TaskType.DVPP,
            name=name,
            op_type="JpegDecode",
            nbytes=nbytes,
            attrs=attrs,
        )

    def vpc(
        self,
        stream: Stream,
        op: str,
        inputs: Sequence[tuple[int, int]],
        outputs: Sequence[tuple[int, int]],
        *,
        name: str = "acldvppVpcResizeAsync",
    ) -> TaskRecord:
        """One VPC task (``op``: "Resize", "Crop", "CropResize" ...) on ``stream``."""
        duration, channels = vpc_ns(self.spec, inputs, outputs)
        attrs: dict[str, object] = {
            "engine": "VPC",
            "images": len(inputs),
            "channels": channels,
            "pixels": sum(w * h for w, h in inputs),
        }
        return self.engine.submit_unit_task(
            stream,
            "vpc",
            channels,
            duration,
            kind=TaskKind.DVPP,
            task_type=TaskType.DVPP,
            name=name,
            op_type=op,
            attrs=attrs,
        )
