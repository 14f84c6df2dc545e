"""An AMCT-like post-training quantisation flow: calibrate, convert, measure the error.

    cal = msprof_py.quant.quantize(model, calib_batches, per_channel=True)
    report = msprof_py.quant.convert(model, cal)          # in place, like amct.convert
    print(report)                                          # max abs / relative output error

:func:`quantize` runs the float model on the calibration batches (no gradients) with a min/max
observer on the input of every ``nn.Linear`` (per tensor), and takes each weight's min/max per
output channel (``per_channel=True``) or per tensor. Scales are symmetric int8:
``s = max(|min|, |max|) / 127``. It keeps the float model's output on the last calibration
batch as the reference. :func:`convert` replaces every calibrated Linear by
:class:`~msprof_py.quant.layers.Int8Linear` (int8 weights on the device, activations quantised
by a vector kernel, int8 matmul with int32 accumulation), runs the converted model on the
reference batch (or ``eval_batch``, run through the float model first) and reports the error
it measured. ``nn.MultiheadAttention``'s projections are left in float, as PyTorch's own
quantisation leaves them (its forward reads their weights directly).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from msprof_py.quant.layers import QMAX, Int8Linear

__all__ = ["Calibration", "LayerScales", "QuantReport", "convert", "quantize"]


@dataclass
class LayerScales:
    """What calibration measured for one Linear layer."""

    name: str
    in_features: int
    out_features: int
    act_min: float = float("inf")
    act_max: float = float("-inf")

    @property
    def act_scale(self) -> float:
        """Symmetric per-tensor int8 scale of the layer's input."""
        amax = max(abs(self.act_min), abs(self.act_max))
        return amax / QMAX if amax > 0 else 1.0


@dataclass
class Calibration:
    """The result of :func:`quantize`: per-layer scales and the float reference output."""

    per_channel: bool
    layers: dict[str, LayerScales]
    batches: int
    #: the last calibration batch and the float model's output on it
    reference_batch: Any = field(default=None, repr=False)
    reference_output: Any = field(default=None, repr=False)


@dataclass
class QuantReport:
    """The accuracy delta :func:`convert` measured: converted model vs the float model."""

    layers: list[str]
    per_channel: bool
    batch: str
    max_abs_error: float
    #: max abs error / max abs of the float output
    rel_error: float
    mean_abs_error: float
    ref_max_abs: float

    def __str__(self) -> str:
        scheme = "per-channel" if self.per_channel else "per-tensor"
        return (
            f"int8 ({scheme} weights, per-tensor activations): {len(self.layers)} Linear "
            f"layer(s) converted; on the {self.batch} batch: max abs error "
            f"{self.max_abs_error:.4g}, relative {self.rel_error:.3%} of max |output| "
            f"{self.ref_max_abs:.4g}, mean abs error {self.mean_abs_error:.4g}"
        )


def _quantizable(model: nn.Module) -> Iterator[tuple[str, nn.Linear]]:
    """Linear layers the flow converts (not the projections inside MultiheadAttention)."""
    skip: set[int] = set()
    for module in model.modules():
        if isinstance(module, nn.MultiheadAttention):
            skip.update(id(m) for m in module.modules())
    for name, module in model.named_modules():
        if type(module) is nn.Linear and id(module) not in skip:
            yield name, module


def _call(model: nn.Module, batch: Any) -> Any:
    if isinstance(batch, dict):
        return model(**batch)
    if isinstance(batch, (tuple, list)):
        return model(*batch)
    return model(batch)


def _tensors(out: Any) -> list[torch.Tensor]:
    """The floating tensors of a model output (tensor, tuple, list, dict), flattened."""
    if isinstance(out, torch.Tensor):
        return [out] if out.is_floating_point() else []
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _tensors(o)]
    return []


def _host_copy(out: Any) -> list[torch.Tensor]:
    return [t.detach().float().cpu() for t in _tensors(out)]


def quantize(
    model: nn.Module, calib_batches: Iterable[Any], *, per_channel: bool = True
) -> Calibration:
    """Calibrate ``model`` on ``calib_batches`` (each a tensor, tuple of args or dict of
    kwargs): min/max of every Linear's input per tensor; weights are read at convert time
    (per output channel with ``per_channel``). The model is not changed."""
    layers = {
        name: LayerScales(name, m.in_features, m.out_features) for name, m in _quantizable(model)
    }
    if not layers:
        raise ValueError("quantize: the model has no nn.Linear layer to quantise")
    hooks = []
    for name, module in _quantizable(model):
        scales = layers[name]

        def observe(_: nn.Module, args: tuple, scales: LayerScales = scales) -> None:
            x = args[0].detach()
            lo, hi = torch.aminmax(x.float())
            scales.act_min = min(scales.act_min, float(lo))
            scales.act_max = max(scales.act_max, float(hi))

        hooks.append(module.register_forward_pre_hook(observe))
    count, batch, out = 0, None, None
    try:
        with torch.no_grad():
            for batch in calib_batches:
                out = _call(model, batch)
                count += 1
    finally:
        for h in hooks:
            h.remove()
    if count == 0:
        raise ValueError("quantize: calib_batches gave no batch")
    return Calibration(per_channel, layers, count, batch, _host_copy(out))


def convert(model: nn.Module, calibration: Calibration, *, eval_batch: Any = None) -> QuantReport:
    """Replace the calibrated Linear layers of ``model`` by :class:`Int8Linear` (in place) and
    report the output error against the float model on ``eval_batch`` (a held-out batch) or,
    without one, on the last calibration batch."""
    if eval_batch is not None:
        with torch.no_grad():
            reference = _host_copy(_call(model, eval_batch))
        batch, where = eval_batch, "held-out"
    else:
        reference, batch, where = (
            calibration.reference_output,
            calibration.reference_batch,
            "calibration",
        )
    converted = []
    for name, module in list(_quantizable(model)):
        scales = calibration.layers.get(name)
        if scales is None:
            continue
        layer = Int8Linear.from_float(module, scales.act_scale, per_channel=calibration.per_channel)
        _replace(model, name, layer)
        converted.append(name)
    with torch.no_grad():
        got = _host_copy(_call(model, batch))
    if len(got) != len(reference) or not got:
        raise RuntimeError("convert: the converted model's outputs differ in number from float")
    errors = [(g - r).abs() for g, r in zip(got, reference, strict=True)]
    max_abs = max(float(e.max()) for e in errors)
    ref_max = max(float(r.abs().max()) for r in reference)
    mean_abs = float(torch.cat([e.reshape(-1) for e in errors]).mean())
    return QuantReport(
        layers=converted,
        per_channel=calibration.per_channel,
        batch=where,
        max_abs_error=max_abs,
        rel_error=max_abs / ref_max if ref_max > 0 else 0.0,
        mean_abs_error=mean_abs,
        ref_max_abs=ref_max,
    )


def _replace(model: nn.Module, name: str, layer: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, layer)
