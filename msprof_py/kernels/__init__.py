"""Custom kernels on the simulated NPU: an Ascend C-like DSL, a TIK facade, per-pipe timing.

(Full documentation below is kept in sync with the modules; see each module for details.)
"""

from msprof_py.kernels.chip import Buffer, Chip
from msprof_py.kernels.core import current
from msprof_py.kernels.cube import LoadData, Mmad
from msprof_py.kernels.datacopy import DataCopy, DataCopyPad, DataCopyParams, Fixpipe
from msprof_py.kernels.errors import (
    AlignmentError,
    BufferOverflowError,
    KernelError,
    OperandError,
    QueueError,
    SyncError,
)
from msprof_py.kernels.launch import launch
from msprof_py.kernels.queues import TBuf, TPipe, TQue
from msprof_py.kernels.results import BlockResult, CoreResult, InstrRecord, LaunchResult
from msprof_py.kernels.sync import (
    GetBlockIdx,
    GetBlockNum,
    PipeBarrier,
    ScalarWork,
    SetFlag,
    WaitFlag,
)
from msprof_py.kernels.tensors import GlobalTensor, LocalTensor, TPosition
from msprof_py.kernels.timeline import HardEvent, Pipe
from msprof_py.kernels.vector import (
    Abs,
    Add,
    Adds,
    Cast,
    Div,
    Duplicate,
    Exp,
    Ln,
    Max,
    Maxs,
    Min,
    Mins,
    Mul,
    Muls,
    Reciprocal,
    ReduceMax,
    ReduceMin,
    ReduceSum,
    Relu,
    Sqrt,
    Sub,
)

__all__ = [
    "Abs", "Add", "Adds", "AlignmentError", "BlockResult", "Buffer", "BufferOverflowError",
    "Cast", "Chip", "CoreResult", "DataCopy", "DataCopyPad", "DataCopyParams", "Div",
    "Duplicate", "Exp", "Fixpipe", "GetBlockIdx", "GetBlockNum", "GlobalTensor", "HardEvent",
    "InstrRecord", "KernelError", "LaunchResult", "Ln", "LoadData", "LocalTensor", "Max", "Maxs",
    "Min", "Mins", "Mmad", "Mul", "Muls", "OperandError", "Pipe", "PipeBarrier", "QueueError",
    "Reciprocal", "ReduceMax", "ReduceMin", "ReduceSum", "Relu", "ScalarWork", "SetFlag", "Sqrt",
    "Sub", "SyncError", "TBuf", "TPipe", "TPosition", "TQue", "WaitFlag", "current", "launch",
]  # fmt: skip
