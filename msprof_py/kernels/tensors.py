"""Tensors: `GlobalTensor` over a numpy array in GM, `LocalTensor` in a core's on-chip buffer.

A local tensor is a typed view of bytes of its core's buffer memory (one numpy byte array per
buffer), so sub-tensors (``t[off:]``) alias as on the device. Positions name the logical role
a queue gives a tensor and map onto buffers: VECIN / VECCALC / VECOUT -> UB, A1 / B1 -> L1,
A2 -> L0A, B2 -> L0B, CO1 -> L0C; GM (and CO2 on A2) is global memory.
"""

from __future__ import annotations

import itertools
from enum import Enum
from typing import TYPE_CHECKING, Any

import numpy as np

from msprof_py.kernels.bf16 import BF16
from msprof_py.kernels.chip import Buffer
from msprof_py.kernels.errors import AlignmentError, OperandError
from msprof_py.kernels.timeline import Pipe, Region

if TYPE_CHECKING:
    from msprof_py.kernels.core import CoreState
    from msprof_py.kernels.queues import _Slot


class TPosition(str, Enum):
    """Logical positions (Ascend C TPosition)."""

    GM = "GM"
    VECIN = "VECIN"
    VECCALC = "VECCALC"
    VECOUT = "VECOUT"
    A1 = "A1"
    B1 = "B1"
    A2 = "A2"
    B2 = "B2"
    CO1 = "CO1"
    CO2 = "CO2"


POSITION_BUFFER: dict[TPosition, Buffer] = {
    TPosition.GM: Buffer.GM,
    TPosition.VECIN: Buffer.UB,
    TPosition.VECCALC: Buffer.UB,
    TPosition.VECOUT: Buffer.UB,
    TPosition.A1: Buffer.L1,
    TPosition.B1: Buffer.L1,
    TPosition.A2: Buffer.L0A,
    TPosition.B2: Buffer.L0B,
    TPosition.CO1: Buffer.L0C,
    TPosition.CO2: Buffer.GM,
}

#: dtypes the simulator computes in (bfloat16: uint16 bit patterns, see :mod:`bf16`)
_DTYPES = {
    "bfloat16": BF16,
    "float16": np.float16,
    "float32": np.float32,
    "int8": np.int8,
    "uint8": np.uint8,
    "int16": np.int16,
    "int32": np.int32,
    "int64": np.int64,
    "uint16": np.uint16,
    "uint32": np.uint32,
}
_ALIASES = {"half": "float16", "fp16": "float16", "float": "float32", "fp32": "float32",
            "bf16": "bfloat16"}  # fmt: skip


def as_dtype(dtype: Any) -> np.dtype:
    """A numpy dtype from a name ("float16", "half", "fp32"...) or a numpy dtype."""
    if isinstance(dtype, str):
        name = _ALIASES.get(dtype.lower(), dtype.lower())
        if name not in _DTYPES:
            raise OperandError(f"dtype {dtype!r} is not supported by the kernel simulator")
        return np.dtype(_DTYPES[name])
    return np.dtype(dtype)


_GM_KEYS = itertools.count()


class GlobalTensor:
    """A tensor in global memory: a flat view of a numpy array from element ``offset`` on.

    ``x[n:]`` / ``x[n:m]`` give sub-tensors (element offsets), like
    ``xGm.SetGlobalBuffer(x + n, m - n)`` in Ascend C.
    """

    position = TPosition.GM
    buffer = Buffer.GM

    def __init__(self, array: np.ndarray, name: str = "gm", *, _key: str | None = None) -> None:
        if not isinstance(array, np.ndarray):
            raise OperandError(f"GlobalTensor {name}: needs a numpy array, got {type(array)}")
        self.array = array
        self.name = name
        self.key = _key or f"GM:{name}#{next(_GM_KEYS)}"
        self.flat = array.reshape(-1) if array.flags.c_contiguous else array.ravel()
        if not np.shares_memory(self.flat, array) and array.size:
            raise OperandError(f"GlobalTensor {name}: the array must be C-contiguous")
        self.base_bytes = 0

    @property
    def dtype(self) -> np.dtype:
        """Element dtype."""
        return self.array.dtype

    @property
    def size(self) -> int:
        """Elements in the tensor."""
        return self.flat.size

    def __getitem__(self, index: slice | int) -> GlobalTensor:
        if isinstance(index, int):
            index = slice(index, None)
        start, stop, step = index.indices(self.flat.size)
        if step != 1:
            raise OperandError(f"GlobalTensor {self.name}: strided slices are not supported")
        sub = GlobalTensor.__new__(GlobalTensor)
        sub.array = self.array
        sub.name = self.name
        sub.key = self.key
        sub.flat = self.flat[start:stop]
        sub.base_bytes = self.base_bytes + start * self.dtype.itemsize
        return sub

    def region(self, nbytes: int, offset_bytes: int = 0) -> Region:
        """The GM byte range an access of ``nbytes`` from ``offset_bytes`` touches."""
        lo = self.base_bytes + offset_bytes
        return Region(self.key, lo, lo + nbytes)

    def bytes_view(self) -> np.ndarray:
        """The tensor's bytes (writable view into the array)."""
        return self.flat.view(np.uint8)

    def __repr__(self) -> str:
        return f"GlobalTensor({self.name}, {self.size} x {self.dtype})"


class LocalTensor:
    """A tensor in one core's on-chip buffer: ``count`` elements of ``dtype`` at byte ``offset``.

    ``t[n:]`` is the sub-tensor from element n (it must stay aligned when an instruction uses
    it). ``GetValue`` / ``SetValue`` are scalar accesses (S pipe).
    """

    def __init__(
        self,
        core: CoreState,
        position: TPosition,
        offset: int,
        dtype: Any,
        count: int,
        name: str = "",
        slot: _Slot | None = None,
    ) -> None:
        self.core = core
        self.position = position
        self.buffer = POSITION_BUFFER[position]
        self.offset = offset
        self.dtype = as_dtype(dtype)
        self.count = count
        self.name = name or f"{self.buffer.value}@{offset}"
        self.slot = slot

    # ---- views -----------------------------------------------------------------------------

    @property
    def nbytes(self) -> int:
        """Bytes the tensor spans."""
        return self.count * self.dtype.itemsize

    @property
    def size(self) -> int:
        """Elements in the tensor."""
        return self.count

    def data(self) -> np.ndarray:
        """The tensor's elements as a writable numpy view of the core's buffer."""
        raw = self.core.memory[self.buffer][self.offset : self.offset + self.nbytes]
        return raw.view(self.dtype)

    def bytes_view(self) -> np.ndarray:
        """The tensor's bytes."""
        return self.core.memory[self.buffer][self.offset : self.offset + self.nbytes]

    def numpy(self) -> np.ndarray:
        """A copy of the elements (for checking results)."""
        return self.data().copy()

    def __getitem__(self, index: slice | int) -> LocalTensor:
        if isinstance(index, int):
            index = slice(index, None)
        start, stop, step = index.indices(self.count)
        if step != 1:
            raise OperandError(f"{self.name}: strided slices are not supported")
        sub = LocalTensor(
            self.core,
            self.position,
            self.offset + start * self.dtype.itemsize,
            self.dtype,
            stop - start,
            f"{self.name}[{start}:]",
            self.slot,
        )
        return sub

    def reinterpret_cast(self, dtype: Any) -> LocalTensor:
        """The same bytes as another dtype (ReinterpretCast)."""
        dt = as_dtype(dtype)
        return LocalTensor(
            self.core,
            self.position,
            self.offset,
            dt,
            self.nbytes // dt.itemsize,
            self.name,
            self.slot,
        )

    def region(self, nbytes: int | None = None) -> Region:
        """The buffer byte range an access of ``nbytes`` (default: all) touches."""
        n = self.nbytes if nbytes is None else nbytes
        return Region(self.buffer.value, self.offset, self.offset + n)

    def check_aligned(self, what: str) -> None:
        """Raise unless the tensor's address meets its buffer's alignment."""
        align = self.core.chip.alignment[self.buffer]
        if self.offset % align:
            raise AlignmentError(
                f"{self.buffer.value} address misaligned: {what} uses {self.name} at byte "
                f"{self.offset}, not a multiple of {align} B"
            )

    # ---- scalar access ---------------------------------------------------------------------

    def GetValue(self, index: int) -> Any:
        """Read one element on the scalar unit."""
        self._scalar("GetValue", index, write=False)
        return self.data()[index].item()

    def SetValue(self, index: int, value: Any) -> None:
        """Write one element on the scalar unit."""
        self._scalar("SetValue", index, write=True)
        self.data()[index] = value

    def _scalar(self, name: str, index: int, *, write: bool) -> None:
        from msprof_py.kernels import costs

        if not 0 <= index < self.count:
            raise OperandError(f"{name}: index {index} outside {self.name} ({self.count})")
        one = self[index : index + 1]
        access = [(one, one.nbytes)]
        self.core.issue(
            Pipe.S,
            name,
            costs.SCALAR_CYCLES,
            reads=[] if write else access,
            writes=access if write else [],
        )

    def __repr__(self) -> str:
        return f"LocalTensor({self.name}, {self.count} x {self.dtype}, {self.position.value})"
