"""DeviceSpec: the typed, validated description of one simulated NPU.

Specs are TOML files. Presets ship in ``presets/`` as package data; users may pass their own file,
optionally starting from a preset with ``base = "ascend910b"`` and overriding single fields.
Every value may be written plainly (``cores = 24``) or with its provenance
(``cores = { value = 24, source = "CANN Ascend910B2.ini [V]" }``); presets always carry a source.

Values are stored in base units: hertz, bytes, bytes per second and integer nanoseconds.
"""

from __future__ import annotations

import copy
import math
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any

from msprof_py.device.dtypes import canonical, itemsize

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on Python 3.10
    import tomli as tomllib

DEFAULT_PRESET = "ascend910b"


class SpecError(ValueError):
    """A device spec file is missing, malformed or has an invalid field (the message names it)."""


# --------------------------------------------------------------------------------------------
# Typed sections
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CubeSpec:
    """AI Core cube units (AIC): matrix multiply on fractal tiles."""

    cores: int
    clock_hz: float
    #: steady-state MMAD issue efficiency inside a block's K loop (double-buffered pipes)
    efficiency: float
    base_tile_m: int
    base_tile_n: int
    #: fixed cycles per block: pipeline fill (first operand slices) and the FixPipe write-out
    block_overhead_cycles: int
    #: the shortest K slice one core takes when a narrow-output GEMM splits its K axis
    min_split_k: int
    #: MTE2 feed efficiency when an operand's rows are not 512 B-aligned (unaligned bursts)
    unaligned_feed_efficiency: float
    #: MTE1 rates, L1 -> L0A and L1 -> L0B, in bytes per cycle
    l0a_bytes_per_cycle: int
    l0b_bytes_per_cycle: int
    #: dtype -> (m0, k0, n0): the fractal one cube core multiplies per cycle.
    fractal: Mapping[str, tuple[int, int, int]]


@dataclass(frozen=True)
class VectorSpec:
    """Vector units (AIV): elementwise and reduction work on the Unified Buffer."""

    cores: int
    clock_hz: float
    bytes_per_cycle: int
    efficiency: float
    min_bytes_per_core: int


@dataclass(frozen=True)
class AiCpuSpec:
    """AI CPU cores: the slow fallback engine for ops an AI Core does not run."""

    cores: int
    #: FLOP/s one AI CPU (ARM) core sustains on an op's arithmetic
    flops_per_s: float
    #: bytes/s one AI CPU core streams between HBM and its caches
    bytes_per_s: float
    launch_overhead_ns: int


@dataclass(frozen=True)
class MemorySpec:
    """Device memory (HBM) and the L2 cache."""

    hbm_capacity_bytes: int
    reserved_bytes: int
    hbm_bandwidth: float
    hbm_efficiency: float
    gm_bytes_per_cycle_per_core: int
    l2_bytes: int
    l2_bandwidth: float
    #: serve a kernel's reads of buffers still in L2 at L2 bandwidth (:mod:`msprof_py.device.l2`)
    l2_reuse: bool = False

    @property
    def usable_bytes(self) -> int:
        """HBM left to applications after the system reserve (what aclrtGetMemInfo reports)."""
        return self.hbm_capacity_bytes - self.reserved_bytes

    @property
    def effective_bandwidth(self) -> float:
        """Achievable HBM bandwidth in bytes/s (peak x efficiency)."""
        return self.hbm_bandwidth * self.hbm_efficiency


@dataclass(frozen=True)
class BufferSpec:
    """On-chip buffers of one core."""

    l1_bytes: int
    l0a_bytes: int
    l0b_bytes: int
    l0c_bytes: int
    ub_bytes: int


@dataclass(frozen=True)
class HostLinkSpec:
    """The host <-> device link (PCIe)."""

    pinned_bandwidth: float
    pageable_bandwidth: float
    pinned_latency_ns: int
    pageable_latency_ns: int


@dataclass(frozen=True)
class DispatchSpec:
    """Host-side cost of launching work, and device-side scheduling cost per task."""

    stage1_ns: int
    stage2_ns: int
    task_queue: bool
    task_queue_depth: int
    device_sched_ns: int
    api_call_ns: int
    sync_ns: int


@dataclass(frozen=True)
class HcclSpec:
    """Collective-communication links and the alpha-beta-gamma parameters."""

    ranks_per_server: int
    intra_alpha_ns: int
    intra_link_bandwidth: float
    intra_links: int
    inter_alpha_ns: int
    inter_bandwidth: float
    reduce_bandwidth: float
    intra_algorithm: str
    inter_algorithm: str
    #: ranks per HCCS group inside a server (0: the whole server is one group); an 8-chip 910A
    #: server is two 4-chip HCCS meshes joined over PCIe
    mesh_size: int = 0
    #: the link between the HCCS groups of one server (PCIe): alpha and bandwidth per rank
    group_alpha_ns: int = 0
    group_bandwidth: float = 0.0


@dataclass(frozen=True)
class AllocationSpec:
    """aclrtMalloc rounding and page policy, and the caching allocator's block sizes."""

    alignment_bytes: int
    size_round_bytes: int
    size_extra_bytes: int
    normal_page_bytes: int
    huge_page_bytes: int
    huge_threshold_bytes: int
    default_policy: str
    caching_round_bytes: int
    small_request_max_bytes: int
    small_segment_bytes: int
    large_segment_bytes: int
    large_segment_threshold_bytes: int


@dataclass(frozen=True)
class LimitsSpec:
    """Runtime limits."""

    max_streams: int
    stream_depth: int
    max_block_dim: int


@dataclass(frozen=True)
class CompileSpec:
    """How the host builds an op's kernel for a new (op, shapes, dtypes, formats, attributes).

    ``jit_compile`` is the chip's default of ``torch_npu.npu.set_compile_mode``: True compiles
    each new key online (``online_compile_ns`` on the host), False runs prebuilt binary kernels
    and pays only host tiling for a new key (``tiling_ns``; tiling of a known key is inside
    ``dispatch.stage2``). Specs without the section compile nothing (the costs are 0).
    """

    jit_compile: bool = False
    online_compile_ns: int = 0
    tiling_ns: int = 0


#: SoC versions of the A2/A3 generation (910B, 910_93)
A2_SOCS = ("Ascend910B", "Ascend910_93")


@dataclass(frozen=True)
class DeviceSpec:
    """A complete, validated simulated-NPU description. Load with :meth:`load`."""

    name: str
    soc_version: str
    description: str
    core_mode: str
    cube: CubeSpec
    vector: VectorSpec
    aicpu: AiCpuSpec
    memory: MemorySpec
    buffers: BufferSpec
    host_link: HostLinkSpec
    dispatch: DispatchSpec
    hccl: HcclSpec
    allocation: AllocationSpec
    limits: LimitsSpec
    compile: CompileSpec = field(default_factory=CompileSpec)
    #: dotted field name (as written in the TOML file) -> where the value comes from.
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    #: the file the spec was read from (a preset or a user file).
    origin: str = field(default="", compare=False)
    #: the TOML tables the spec was built from (``base`` merged in): :meth:`from_mapping` of
    #: it gives this spec back; profiles carry it, so they never name a file to read.
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def a2_class(self) -> bool:
        """An A2/A3-class device (Ascend910B*, Ascend910_93): split cube (AIC) and vector (AIV)
        cores, MIX kernels, the fused FlashAttention kernels and the multi-tensor (foreach)
        kernels."""
        return self.soc_version.startswith(A2_SOCS)

    # ---- loading -----------------------------------------------------------------------------

    @classmethod
    def load(cls, spec: str | Path | DeviceSpec | None = None) -> DeviceSpec:
        """Load a spec from a preset name, a TOML file path, or return a given spec unchanged."""
        if spec is None:
            spec = DEFAULT_PRESET
        if isinstance(spec, DeviceSpec):
            return spec
        path = Path(spec)
        if isinstance(spec, Path) or path.suffix == ".toml" or path.exists():
            return cls.from_file(path)
        return cls.preset(str(spec))

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], origin: str = "inline spec") -> DeviceSpec:
        """Build a spec from TOML-shaped tables (as :attr:`raw` holds them), validated as a
        spec file is; nothing is read from disk."""
        if not isinstance(raw, Mapping):
            raise SpecError(f"{origin}: a device spec must be a table, got {type(raw).__name__}")
        return _build(copy.deepcopy(dict(raw)), origin=origin, default_source=f"{origin}")

    @classmethod
    def preset(cls, name: str) -> DeviceSpec:
        """Load a shipped preset by name (see :func:`preset_names`)."""
        raw = _read_preset(name)
        return _build(raw, origin=f"preset {name}", default_source=None)

    @classmethod
    def from_file(cls, path: str | Path) -> DeviceSpec:
        """Load a user spec file. ``base = "<preset>"`` at the top starts from that preset."""
        path = Path(path)
        if not path.is_file():
            raise SpecError(f"device spec file not found: {path}")
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise SpecError(f"{path}: not valid TOML: {exc}") from None
        base = raw.pop("base", None)
        if base is not None:
            if not isinstance(base, str):
                raise SpecError(f"{path}: field 'base' must be a preset name")
            raw = _deep_merge(_read_preset(base), raw)
        return _build(raw, origin=str(path), default_source=f"user file {path.name}")

    # ---- derived figures -----------------------------------------------------------------------

    def cube_fractal(self, dtype: str) -> tuple[int, int, int]:
        """(m0, k0, n0) of the cube fractal for ``dtype``; raises if the cube cannot run it."""
        name = canonical(dtype)
        try:
            return self.cube.fractal[name]
        except KeyError:
            raise SpecError(
                f"{self.name}: the cube unit has no fractal for dtype {name!r} "
                f"(has: {', '.join(self.cube.fractal)})"
            ) from None

    def cube_peak_flops(self, dtype: str = "float16") -> float:
        """Peak cube FLOP/s for ``dtype`` (2 FLOPs per MAC)."""
        m0, k0, n0 = self.cube_fractal(dtype)
        return self.cube.cores * m0 * k0 * n0 * 2 * self.cube.clock_hz

    def vector_peak_ops(self, dtype: str = "float16") -> float:
        """Peak vector element-operations per second for ``dtype`` (one op per lane per cycle)."""
        lanes = self.vector.bytes_per_cycle // itemsize(dtype)
        return self.vector.cores * lanes * self.vector.clock_hz

    @property
    def shares_core_pool(self) -> bool:
        """True when cube and vector work share one pool of AI Cores (coupled mode)."""
        return self.core_mode == "coupled"

    def source_of(self, dotted: str) -> str:
        """Where the value of ``dotted`` (e.g. ``"cube.cores"``) comes from."""
        return self.sources.get(dotted, "")

    def key_figures(self) -> dict[str, str]:
        """The headline numbers a user compares presets by."""
        gib = 1024**3
        return {
            "soc": self.soc_version,
            "cores": (
                f"{self.cube.cores} AI Core (coupled)"
                if self.shares_core_pool
                else f"{self.cube.cores} AIC + {self.vector.cores} AIV"
            )
            + f", {self.aicpu.cores} AI CPU",
            "clock": f"{self.cube.clock_hz / 1e6:.0f} MHz",
            "fp16 peak": f"{self.cube_peak_flops('float16') / 1e12:.1f} TFLOPS",
            "fp32 peak": (
                f"{self.cube_peak_flops('float32') / 1e12:.1f} TFLOPS"
                if "float32" in self.cube.fractal
                else "n/a"
            ),
            "memory": f"{self.memory.hbm_capacity_bytes / gib:.0f} GiB",
            "bandwidth": f"{self.memory.hbm_bandwidth / 1e12:.2f} TB/s",
            "host link": f"{self.host_link.pinned_bandwidth / 1e9:.0f} GB/s",
        }


def preset_names() -> list[str]:
    """Names of the presets shipped with the package."""
    folder = resources.files("msprof_py.device") / "presets"
    return sorted(
        p.name.removesuffix(".toml") for p in folder.iterdir() if p.name.endswith(".toml")
    )


# --------------------------------------------------------------------------------------------
# Schema: one line per field. (toml key, dataclass attribute, converter)
# --------------------------------------------------------------------------------------------

_GB = 1e9


def _int(minimum: int = 0) -> Callable[[Any], int]:
    def conv(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError("must be an integer")
        if v < minimum:
            raise TypeError(f"must be >= {minimum}")
        return v

    conv.__doc__ = f"integer >= {minimum}"
    return conv


def _pow2(v: Any) -> int:
    n = _int(1)(v)
    if n & (n - 1):
        raise TypeError("must be a power of two")
    return n


def _positive(scale: float = 1.0) -> Callable[[Any], float]:
    def conv(v: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise TypeError("must be a positive number")
        return float(v) * scale

    return conv


def _fraction(v: Any) -> float:
    x = _positive()(v)
    if x > 1:
        raise TypeError("must be in (0, 1]")
    return x


def _us_to_ns(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise TypeError("must be a non-negative number of microseconds")
    return round(float(v) * 1000)


def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError("must be a string")
    return v


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise TypeError("must be true or false")
    return v


def _choice(*options: str) -> Callable[[Any], str]:
    def conv(v: Any) -> str:
        if v not in options:
            raise TypeError(f"must be one of {', '.join(options)}")
        return v

    return conv


def _fractal_table(v: Any) -> dict[str, tuple[int, int, int]]:
    raise AssertionError("fractal is converted by _convert_fractal")  # pragma: no cover


_SECTIONS: dict[str, tuple[type, list[tuple[str, str, Callable[[Any], Any]]]]] = {
    "cube": (
        CubeSpec,
        [
            ("cores", "cores", _int(1)),
            ("clock_mhz", "clock_hz", _positive(1e6)),
            ("efficiency", "efficiency", _fraction),
            ("base_tile_m", "base_tile_m", _int(1)),
            ("base_tile_n", "base_tile_n", _int(1)),
            ("block_overhead_cycles", "block_overhead_cycles", _int(0)),
            ("min_split_k", "min_split_k", _int(1)),
            ("unaligned_feed_efficiency", "unaligned_feed_efficiency", _fraction),
            ("l0a_bytes_per_cycle", "l0a_bytes_per_cycle", _int(1)),
            ("l0b_bytes_per_cycle", "l0b_bytes_per_cycle", _int(1)),
            ("fractal", "fractal", _fractal_table),
        ],
    ),
    "vector": (
        VectorSpec,
        [
            ("cores", "cores", _int(1)),
            ("clock_mhz", "clock_hz", _positive(1e6)),
            ("bytes_per_cycle", "bytes_per_cycle", _pow2),
            ("efficiency", "efficiency", _fraction),
            ("min_bytes_per_core", "min_bytes_per_core", _int(1)),
        ],
    ),
    "aicpu": (
        AiCpuSpec,
        [
            ("cores", "cores", _int(1)),
            ("flops_per_s", "flops_per_s", _positive()),
            ("bytes_per_s", "bytes_per_s", _positive()),
            ("launch_overhead_us", "launch_overhead_ns", _us_to_ns),
        ],
    ),
    "memory": (
        MemorySpec,
        [
            ("hbm_capacity_bytes", "hbm_capacity_bytes", _int(1)),
            ("reserved_bytes", "reserved_bytes", _int(0)),
            ("hbm_bandwidth_gb_s", "hbm_bandwidth", _positive(_GB)),
            ("hbm_efficiency", "hbm_efficiency", _fraction),
            ("gm_bytes_per_cycle_per_core", "gm_bytes_per_cycle_per_core", _int(1)),
            ("l2_bytes", "l2_bytes", _int(0)),
            ("l2_bandwidth_gb_s", "l2_bandwidth", _positive(_GB)),
            ("l2_reuse", "l2_reuse", _bool),
        ],
    ),
    "buffers": (
        BufferSpec,
        [
            ("l1_bytes", "l1_bytes", _int(1)),
            ("l0a_bytes", "l0a_bytes", _int(1)),
            ("l0b_bytes", "l0b_bytes", _int(1)),
            ("l0c_bytes", "l0c_bytes", _int(1)),
            ("ub_bytes", "ub_bytes", _int(1)),
        ],
    ),
    "host_link": (
        HostLinkSpec,
        [
            ("pinned_bandwidth_gb_s", "pinned_bandwidth", _positive(_GB)),
            ("pageable_bandwidth_gb_s", "pageable_bandwidth", _positive(_GB)),
            ("pinned_latency_us", "pinned_latency_ns", _us_to_ns),
            ("pageable_latency_us", "pageable_latency_ns", _us_to_ns),
        ],
    ),
    "dispatch": (
        DispatchSpec,
        [
            ("stage1_us", "stage1_ns", _us_to_ns),
            ("stage2_us", "stage2_ns", _us_to_ns),
            ("task_queue", "task_queue", _bool),
            ("task_queue_depth", "task_queue_depth", _int(1)),
            ("device_sched_us", "device_sched_ns", _us_to_ns),
            ("api_call_us", "api_call_ns", _us_to_ns),
            ("sync_us", "sync_ns", _us_to_ns),
        ],
    ),
    "hccl": (
        HcclSpec,
        [
            ("ranks_per_server", "ranks_per_server", _int(1)),
            ("intra_alpha_us", "intra_alpha_ns", _us_to_ns),
            ("intra_link_bandwidth_gb_s", "intra_link_bandwidth", _positive(_GB)),
            ("intra_links", "intra_links", _int(1)),
            ("inter_alpha_us", "inter_alpha_ns", _us_to_ns),
            ("inter_bandwidth_gb_s", "inter_bandwidth", _positive(_GB)),
            ("reduce_bandwidth_gb_s", "reduce_bandwidth", _positive(_GB)),
            ("intra_algorithm", "intra_algorithm", _choice("mesh", "ring")),
            ("inter_algorithm", "inter_algorithm", _choice("ring", "hd", "nhr")),
            ("mesh_size", "mesh_size", _int(0)),
            ("group_alpha_us", "group_alpha_ns", _us_to_ns),
            ("group_bandwidth_gb_s", "group_bandwidth", _positive(_GB)),
        ],
    ),
    "allocation": (
        AllocationSpec,
        [
            ("alignment_bytes", "alignment_bytes", _pow2),
            ("size_round_bytes", "size_round_bytes", _pow2),
            ("size_extra_bytes", "size_extra_bytes", _int(0)),
            ("normal_page_bytes", "normal_page_bytes", _pow2),
            ("huge_page_bytes", "huge_page_bytes", _pow2),
            ("huge_threshold_bytes", "huge_threshold_bytes", _int(0)),
            ("default_policy", "default_policy", _choice("HUGE_FIRST", "HUGE_ONLY", "NORMAL_ONLY")),
            ("caching_round_bytes", "caching_round_bytes", _pow2),
            ("small_request_max_bytes", "small_request_max_bytes", _int(1)),
            ("small_segment_bytes", "small_segment_bytes", _int(1)),
            ("large_segment_bytes", "large_segment_bytes", _int(1)),
            ("large_segment_threshold_bytes", "large_segment_threshold_bytes", _int(1)),
        ],
    ),
    "limits": (
        LimitsSpec,
        [
            ("max_streams", "max_streams", _int(1)),
            ("stream_depth", "stream_depth", _int(1)),
            ("max_block_dim", "max_block_dim", _int(1)),
        ],
    ),
    "compile": (
        CompileSpec,
        [
            ("jit_compile", "jit_compile", _bool),
            ("online_compile_us", "online_compile_ns", _us_to_ns),
            ("tiling_us", "tiling_ns", _us_to_ns),
        ],
    ),
}

_DEVICE_FIELDS: list[tuple[str, Callable[[Any], Any]]] = [
    ("name", _str),
    ("soc_version", _str),
    ("description", _str),
    ("core_mode", _choice("split", "coupled")),
]


# --------------------------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------------------------


def _read_preset(name: str) -> dict[str, Any]:
    folder = resources.files("msprof_py.device") / "presets"
    entry = folder / f"{name}.toml"
    if not entry.is_file():
        raise SpecError(f"unknown device preset {name!r}; available: {', '.join(preset_names())}")
    return tomllib.loads(entry.read_text(encoding="utf-8"))


def _deep_merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        old = merged.get(key)
        is_table = isinstance(value, dict) and "value" not in value
        if is_table and isinstance(old, dict) and "value" not in old:
            merged[key] = _deep_merge(old, value)
        else:
            merged[key] = value
    return merged


def _unwrap(raw: Any, dotted: str, default_source: str | None) -> tuple[Any, str]:
    """Split ``{value, source}`` into its parts; a plain value takes ``default_source``."""
    if isinstance(raw, dict) and "value" in raw:
        extra = set(raw) - {"value", "source"}
        if extra:
            raise SpecError(f"field '{dotted}': unexpected key(s) {', '.join(sorted(extra))}")
        source = raw.get("source", default_source)
        raw = raw["value"]
    else:
        source = default_source
    if not source:
        raise SpecError(f"field '{dotted}' has no source (presets must cite one)")
    return raw, str(source)


def _convert_fractal(
    table: Any, origin: str, default_source: str | None, sources: dict[str, str]
) -> dict[str, tuple[int, int, int]]:
    if not isinstance(table, dict) or not table:
        raise SpecError(f"{origin}: field 'cube.fractal' must be a table of dtype = [m0, k0, n0]")
    out: dict[str, tuple[int, int, int]] = {}
    for dtype, raw in table.items():
        dotted = f"cube.fractal.{dtype}"
        value, sources[dotted] = _unwrap(raw, dotted, default_source)
        ok = (
            isinstance(value, list)
            and len(value) == 3
            and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in value)
        )
        if not ok:
            raise SpecError(f"{origin}: field '{dotted}' must be [m0, k0, n0] positive integers")
        try:
            out[canonical(dtype)] = (value[0], value[1], value[2])
        except ValueError as exc:
            raise SpecError(f"{origin}: field '{dotted}': {exc}") from None
    return out


#: fields a spec may leave out (added after profiles carrying their spec inline existed): the
#: dataclass default applies, and the spec behaves as before the field existed
OPTIONAL_FIELDS = frozenset(
    {
        "hccl.mesh_size",
        "hccl.group_alpha_us",
        "hccl.group_bandwidth_gb_s",
        "compile.jit_compile",
        "compile.online_compile_us",
        "compile.tiling_us",
        "memory.l2_reuse",
    }
)
#: sections a spec may leave out, each validated by the module that reads it from
#: :attr:`DeviceSpec.raw` (``[dvpp]``: :func:`msprof_py.device.dvpp.dvpp_spec`)
OPTIONAL_SECTIONS = frozenset({"dvpp"})


def _build(raw: dict[str, Any], *, origin: str, default_source: str | None) -> DeviceSpec:
    sources: dict[str, str] = {}
    known = {"device", *_SECTIONS, *OPTIONAL_SECTIONS}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise SpecError(f"{origin}: unknown section(s) {', '.join(unknown)}")

    def read(section: str, key: str, conv: Callable[[Any], Any]) -> Any:
        dotted = f"{section}.{key}"
        table = raw.get(section)
        if not isinstance(table, dict):
            raise SpecError(f"{origin}: missing section [{section}]")
        if key not in table:
            raise SpecError(f"{origin}: missing field '{dotted}'")
        if key == "fractal":
            return _convert_fractal(table[key], origin, default_source, sources)
        value, sources[dotted] = _unwrap(table[key], dotted, default_source)
        try:
            return conv(value)
        except TypeError as exc:
            raise SpecError(f"{origin}: field '{dotted}' {exc}, got {value!r}") from None

    for section, (_, schema) in _SECTIONS.items():
        table = raw.get(section, {})
        allowed = {key for key, _, _ in schema}
        extra = sorted(set(table) - allowed) if isinstance(table, dict) else []
        if extra:
            raise SpecError(f"{origin}: unknown field '{section}.{extra[0]}'")
    device_table = raw.get("device", {})
    extra = sorted(set(device_table) - {k for k, _ in _DEVICE_FIELDS})
    if extra:
        raise SpecError(f"{origin}: unknown field 'device.{extra[0]}'")

    top = {key: read("device", key, conv) for key, conv in _DEVICE_FIELDS}
    parts = {}
    for section, (cls, schema) in _SECTIONS.items():
        given = raw.get(section)
        given = given if isinstance(given, dict) else {}
        present = [
            (key, attr, conv)
            for key, attr, conv in schema
            if f"{section}.{key}" not in OPTIONAL_FIELDS or key in given
        ]
        parts[section] = cls(**{attr: read(section, key, conv) for key, attr, conv in present})
    spec = DeviceSpec(**top, **parts, sources=sources, origin=origin, raw=copy.deepcopy(raw))
    _check_consistency(spec, origin)
    if "dvpp" in raw:
        from msprof_py.device.dvpp import parse_section

        parse_section(raw["dvpp"], origin, default_source)
    return spec


def _check_consistency(spec: DeviceSpec, origin: str) -> None:
    mem = spec.memory
    if mem.reserved_bytes >= mem.hbm_capacity_bytes:
        raise SpecError(f"{origin}: field 'memory.reserved_bytes' must be below hbm_capacity_bytes")
    if "float16" not in spec.cube.fractal:
        raise SpecError(f"{origin}: field 'cube.fractal.float16' is required")
    if spec.shares_core_pool and spec.vector.cores != spec.cube.cores:
        raise SpecError(
            f"{origin}: field 'vector.cores' must equal cube.cores in coupled mode "
            "(each AI Core holds both units)"
        )
    alloc = spec.allocation
    if alloc.huge_page_bytes % alloc.normal_page_bytes:
        raise SpecError(
            f"{origin}: field 'allocation.huge_page_bytes' must be a multiple of normal_page_bytes"
        )
    hccl = spec.hccl
    if hccl.mesh_size and (
        hccl.mesh_size >= hccl.ranks_per_server or hccl.ranks_per_server % hccl.mesh_size
    ):
        raise SpecError(
            f"{origin}: field 'hccl.mesh_size' must divide ranks_per_server and be smaller "
            "(0: one group per server)"
        )
    if hccl.mesh_size and not hccl.group_bandwidth:
        raise SpecError(f"{origin}: field 'hccl.group_bandwidth_gb_s' is needed with mesh_size")
    if alloc.small_segment_bytes < alloc.small_request_max_bytes:
        raise SpecError(
            f"{origin}: field 'allocation.small_segment_bytes' must hold a small request "
            f"(>= small_request_max_bytes)"
        )


def spec_fields() -> list[str]:
    """Every dotted field name a spec file defines (for documentation and tests); those in
    :data:`OPTIONAL_FIELDS` may be left out."""
    names = [f"device.{k}" for k, _ in _DEVICE_FIELDS]
    for section, (_, schema) in _SECTIONS.items():
        names += [f"{section}.{key}" for key, _, _ in schema]
    return names


assert {f.name for f in fields(DeviceSpec)} >= set(_SECTIONS)
