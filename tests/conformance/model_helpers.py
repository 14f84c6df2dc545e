"""Train the same model on CPU and on npu and compare, bit for bit.

The reference is the same program on CPU: same seed, same batches, same optimizer. The npu copy
is a ``copy.deepcopy`` of the CPU model moved with ``.to("npu")`` (a deep copy keeps ties), so any
difference comes from the device: conversions, kernels, optimizers, autocast, RNG.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
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
) -> list[float]:
    """``len(batches)`` optimizer steps; returns the losses."""
    torch.manual_seed(seed)
    opt = optimizer(model.parameters())
    model.train()
    losses = []
    for batch in batches:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model, to_device(batch, device))
        loss.backward()
        opt.step()
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
        if self.losses_cpu != self.losses_npu:
            out.append(f"losses {self.losses_cpu} on CPU, {self.losses_npu} on npu")
        if self.mismatched:
            out.append(f"{len(self.mismatched)} parameters differ, first {self.mismatched[:3]}")
        return out


def compare_training(
    build: Callable[[], nn.Module],
    batches: Sequence[Batch],
    loss_fn: LossFn,
    optimizer: str = "adamw-foreach",
) -> Comparison:
    """Build one model, train a CPU copy and an npu copy on ``batches``, compare."""
    torch.manual_seed(0)
    cpu_model = build()
    npu_model = copy.deepcopy(cpu_model).to("npu")
    factory = OPTIMIZERS[optimizer]
    losses_cpu = train(cpu_model, batches, loss_fn, factory, "cpu")
    losses_npu = train(npu_model, batches, loss_fn, factory, "npu")
    named_cpu = dict(cpu_model.named_parameters())
    named_npu = dict(npu_model.named_parameters())
    mismatched = [
        name
        for name, param in named_cpu.items()
        if name not in named_npu or not torch.equal(param.detach(), named_npu[name].detach().cpu())
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
