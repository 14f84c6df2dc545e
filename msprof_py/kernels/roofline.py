"""Where a launch sits on the chip's roofline: arithmetic intensity vs attained throughput.

Work and traffic come from the instructions the kernel ran:

- GM bytes: what MTE2 read from GM, what MTE3 wrote to it and what Fixpipe wrote (at the
  output dtype's size);
- cube FLOPs: 2 x m x k x n per ``Mmad``; vector ops: one per element of every V instruction
  (UB -> UB copies excluded).

The compute roof is the peak of the unit doing most of the work (the cube's fp16 / int8 peak
from the device preset, or the vector units' lanes x cores x clock); the memory roof is the
preset's HBM bandwidth. Arithmetic intensity = work / GM bytes; ridge = peak / bandwidth. A
kernel left of the ridge can at best reach intensity x bandwidth.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

import numpy as np

from msprof_py.kernels.results import LaunchResult

_MMAD = re.compile(r"m=(\d+) k=(\d+) n=(\d+) (\w+)")
_COUNT = re.compile(r"^(\d+) x (\w+)")
_FIX = re.compile(r"(\w+)->(\w+)$")


@dataclass(frozen=True)
class Roofline:
    """A launch's roofline position (rates per second, bytes, FLOPs)."""

    gm_bytes: int
    cube_flops: float
    vector_ops: float
    #: "cube" or "vector": the unit whose peak is the compute roof
    unit: str
    dtype: str
    peak: float
    hbm_bandwidth: float
    duration_s: float

    @property
    def work(self) -> float:
        """FLOPs (cube) or ops (vector) of the roof's unit."""
        return self.cube_flops if self.unit == "cube" else self.vector_ops

    @property
    def intensity(self) -> float:
        """Work per GM byte (inf when the kernel touches no GM)."""
        return self.work / self.gm_bytes if self.gm_bytes else float("inf")

    @property
    def ridge(self) -> float:
        """Intensity where the memory roof meets the compute roof."""
        return self.peak / self.hbm_bandwidth

    @property
    def attainable(self) -> float:
        """The roof above this intensity: min(peak, intensity x bandwidth)."""
        return min(self.peak, self.intensity * self.hbm_bandwidth)

    @property
    def achieved(self) -> float:
        """Work per second the launch attained."""
        return self.work / self.duration_s if self.duration_s else 0.0

    @property
    def bound(self) -> str:
        """``memory`` left of the ridge, ``compute`` right of it."""
        return "memory" if self.intensity < self.ridge else "compute"

    @property
    def efficiency(self) -> float:
        """Achieved over attainable throughput."""
        return self.achieved / self.attainable if self.attainable else 0.0

    def to_dict(self) -> dict[str, object]:
        """Plain figures (for roofline.json)."""
        return {
            **asdict(self),
            "intensity": self.intensity,
            "ridge": self.ridge,
            "attainable": self.attainable,
            "achieved": self.achieved,
            "bound": self.bound,
            "efficiency": self.efficiency,
        }

    def describe(self) -> str:
        """One line: intensity, ridge, attained vs attainable."""
        what = "FLOP" if self.unit == "cube" else "op"
        return (
            f"{self.intensity:.2f} {what}/B ({self.unit} {self.dtype}, ridge "
            f"{self.ridge:.1f}): {self.bound}-bound side, {self.achieved / 1e12:.3f} of "
            f"{self.attainable / 1e12:.3f} T{what}/s attainable ({self.efficiency:.0%})"
        )


def _itemsize(name: str) -> int:
    return np.dtype(name).itemsize


def roofline(result: LaunchResult) -> Roofline:
    """The roofline position of one launch (see module docstring)."""
    gm = 0
    cube = 0.0
    vector = 0.0
    cube_dtype = vec_dtype = "float16"
    for r in result.instructions():
        if r.pipe in ("MTE2", "MTE3") and "GM" in r.detail:
            gm += r.nbytes
        elif r.pipe == "FIX":
            m = _FIX.search(r.detail)
            gm += r.nbytes * _itemsize(m.group(2)) // _itemsize(m.group(1)) if m else r.nbytes
        elif r.pipe == "M":
            m = _MMAD.search(r.detail)
            if m:
                cube += 2.0 * int(m.group(1)) * int(m.group(2)) * int(m.group(3))
                cube_dtype = m.group(4)
        elif r.pipe == "V" and r.name != "DataCopy":
            m = _COUNT.match(r.detail)
            if m:
                vector += int(m.group(1))
                vec_dtype = m.group(2)
    spec = result.chip.spec
    if cube >= vector and cube > 0:
        unit, dtype, peak = "cube", cube_dtype, spec.cube_peak_flops(cube_dtype)
    else:
        unit, dtype, peak = "vector", vec_dtype, spec.vector_peak_ops(vec_dtype)
    return Roofline(
        gm_bytes=gm,
        cube_flops=cube,
        vector_ops=vector,
        unit=unit,
        dtype=dtype,
        peak=peak,
        hbm_bandwidth=spec.memory.hbm_bandwidth,
        duration_s=result.duration_ns / 1e9,
    )
