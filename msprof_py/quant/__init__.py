"""INT8 inference on the npu: an AMCT-like quantise/convert flow and an int8 Linear layer.

See :mod:`msprof_py.quant.flow` (calibration, conversion, measured error) and
:mod:`msprof_py.quant.layers` (``Int8Linear``: int8 weights on the device, activations
quantised by a vector kernel, ``torch_npu.npu_quant_matmul`` on the cube). Needs the npu
device installed (``msprof_py.adapter.install()`` or a run under ``msprof``).
"""

from __future__ import annotations

from msprof_py.quant.flow import Calibration, LayerScales, QuantReport, convert, quantize
from msprof_py.quant.layers import Int8Linear, quantize_activation

__all__ = [
    "Calibration",
    "Int8Linear",
    "LayerScales",
    "QuantReport",
    "convert",
    "quantize",
    "quantize_activation",
]
