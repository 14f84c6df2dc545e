"""The ``torch_npu`` import shim: what training scripts written for Ascend hardware use.

``msprof_py.adapter.install()`` makes ``import torch_npu`` (and its submodules) resolve to this
package through an import hook, so the shim never shadows a real torch_npu installation outside
an instrumented process, and msprof-py ships no top-level ``torch_npu`` package.
"""

from __future__ import annotations

import torch

from msprof_py.adapter.torch_npu import contrib, npu_compile, optim, profiler
from msprof_py.adapter.torch_npu.format_api import get_npu_format, npu_format_cast, npu_format_cast_
from msprof_py.adapter.torch_npu.fused import (
    npu_fusion_attention,
    npu_rms_norm,
    npu_rotary_mul,
    npu_swiglu,
)
from msprof_py.adapter.torch_npu.quant import npu_quant_matmul, npu_trans_quant_param
from msprof_py.adapter.torch_npu.rnn import npu_lstm

npu = torch.npu
npu_compile.attach(npu)  # torch_npu.npu.set_compile_mode
__version__ = "2.13.0+msprof"

__all__ = [
    "contrib",
    "get_npu_format",
    "npu",
    "npu_format_cast",
    "npu_format_cast_",
    "npu_fusion_attention",
    "npu_lstm",
    "npu_quant_matmul",
    "npu_rms_norm",
    "npu_rotary_mul",
    "npu_swiglu",
    "npu_trans_quant_param",
    "optim",
    "profiler",
]
