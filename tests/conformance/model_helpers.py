"""Train the same model on CPU and on npu and compare, bit for bit.

The reference is the same program on CPU: same seed, same batches, same optimizer. The npu copy
is a ``copy.deepcopy`` of the CPU model moved with ``.to("npu")`` (a deep copy keeps ties), so any
difference comes from the device: conversions, kernels, optimizers, autocast, RNG.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from cuda_autocast import CudaPolicyOnCpu
from opinfo_runner import differing
from torch import nn

Batch = Any
#: (model, batch) -> scalar loss
LossFn = Callable[[nn.Module, Batch], torch.Tensor]
OptimizerFactory = Callable[[Any], torch.optim.Optimizer]

OPTIMIZERS: dict[str, OptimizerFactory] = {
    "adamw-foreach": lambda p: torch.optim.AdamW(p, lr=1e-3, foreach=True),
    "adamw-fused": lambda p: torch.optim.AdamW(p, lr=1e-3, fused=True),
    "sgd-momentum": lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9),
}


def tie_groups(model: nn.Module) -> list[list[str]]:
    """Names of parameters that are one tensor, grouped (groups of one left out)."""
    groups: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(param), []).append(name)
    return sorted(sorted(names) for names in groups.values() if len(names) > 1)


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equal values on any devices (NaN equal to NaN, -0.0 not equal to 0.0)."""
    a, b = a.detach().cpu(), b.detach().cpu()
    return a.dtype == b.dtype and a.shape == b.shape and not bool(differing(a, b).any())


def same_losses(a: Sequence[float], b: Sequence[float]) -> bool:
    """Equal loss lists, NaN equal to NaN."""
    if len(a) != len(b):
        return False
    return all(x == y or (x != x and y != y) for x, y in zip(a, b, strict=True))


def to_device(value: Any, device: str) -> Any:
    """``value`` with every tensor in it (dicts, lists, tuples) moved to ``device``."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {k: to_device(v, device) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v, device) for v in value)
    return value


def train(
    model: nn.Module,
    batches: Sequence[Batch],
    loss_fn: LossFn,
    optimizer: OptimizerFactory,
    device: str,
    seed: int = 0,
    amp: torch.dtype | None = None,
    scaler: bool = False,
) -> list[float]:
    """``len(batches)`` optimizer steps; returns the losses.

    With ``amp``, the forward pass and the loss run under ``torch.autocast(device, amp)``; with
    ``scaler``, the step goes through ``torch.amp.GradScaler(device)``.
    """
    torch.manual_seed(seed)
    opt = optimizer(model.parameters())
    grad_scaler = torch.amp.GradScaler(device) if scaler else None
    model.train()
    losses = []
    for batch in batches:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=amp or torch.float16, enabled=amp is not None):
            loss = loss_fn(model, to_device(batch, device))
        if grad_scaler is None:
            loss.backward()
            opt.step()
        else:
            grad_scaler.scale(loss).backward()
            grad_scaler.step(opt)
            grad_scaler.update()
        losses.append(loss.item())
    return losses


@dataclass
class Comparison:
    """What differs between the CPU and the npu run."""

    losses_cpu: list[float]
    losses_npu: list[float]
    mismatched: list[str]
    parameters_cpu: int
    parameters_npu: int
    ties_cpu: list[list[str]]
    ties_npu: list[list[str]]

    def problems(self) -> list[str]:
        """Human-readable differences (empty when the runs are identical)."""
        out = []
        if self.parameters_cpu != self.parameters_npu:
            out.append(f"parameter count {self.parameters_cpu} on CPU, {self.parameters_npu} npu")
        if self.ties_cpu != self.ties_npu:
            out.append(f"ties {self.ties_cpu} on CPU, {self.ties_npu} on npu")
        if not same_losses(self.losses_cpu, self.losses_npu):
            out.append(f"losses {self.losses_cpu} on CPU, {self.losses_npu} on npu")
        if self.mismatched:
            out.append(f"{len(self.mismatched)} parameters differ, first {self.mismatched[:3]}")
        return out


def compare_training(
    build: Callable[[], nn.Module],
    batches: Sequence[Batch],
    loss_fn: LossFn,
    optimizer: str = "adamw-foreach",
    amp: torch.dtype | None = None,
    scaler: bool = False,
) -> Comparison:
    """Build one model, train a CPU copy and an npu copy on ``batches``, compare.

    With ``amp`` the CPU reference runs CUDA's autocast policy (:class:`CudaPolicyOnCpu`), the
    policy the npu follows, not CPU autocast's own.
    """
    torch.manual_seed(0)
    cpu_model = build()
    npu_model = copy.deepcopy(cpu_model).to("npu")
    factory = OPTIMIZERS[optimizer]
    with CudaPolicyOnCpu() if amp is not None else contextlib.nullcontext():
        losses_cpu = train(cpu_model, batches, loss_fn, factory, "cpu", amp=amp, scaler=scaler)
    losses_npu = train(npu_model, batches, loss_fn, factory, "npu", amp=amp, scaler=scaler)
    named_cpu = dict(cpu_model.named_parameters())
    named_npu = dict(npu_model.named_parameters())
    mismatched = [
        name
        for name, param in named_cpu.items()
        if name not in named_npu or not same_values(param, named_npu[name])
    ]
    return Comparison(
        losses_cpu,
        losses_npu,
        mismatched,
        sum(p.numel() for p in cpu_model.parameters()),
        sum(p.numel() for p in npu_model.parameters()),
        tie_groups(cpu_model),
        tie_groups(npu_model),
    )
