"""torch_npu's fused optimizers: ``NpuFusedAdamW``, ``NpuFusedAdam`` and ``NpuFusedSGD``.

Each is a subclass of the matching ``torch.optim`` class with torch_npu's constructor
signature. ``step()`` updates every parameter of every group with ONE multi-tensor device kernel
(``ApplyAdamW`` / ``ApplyAdam`` / ``ApplyMomentum`` or ``ApplyGradientDescent``), costed as a
vector kernel over all the elements it reads and writes. The values are computed on the host
views of the npu tensors by torch's own single-tensor implementation (``torch.optim.adam.adam``
/ ``torch.optim.sgd.sgd`` with ``foreach=False``), so they are bitwise those of
``torch.optim.AdamW`` / ``Adam`` / ``SGD`` run on CPU.

Differences from torch_npu, on purpose: the optimizer state has torch.optim's layout (a CPU
``step`` tensor, per-parameter ``exp_avg`` ...), so ``state_dict()`` round-trips with torch.optim;
torch_npu instead combines the states into flat buffers. ``amsgrad`` and ``maximize`` work.
New state tensors are created in their parameter's data format without device work (the fused
kernel initialises them), and a gradient held in a format other than its parameter's is
converted (one TransData) before the update, as a format-agnostic kernel needs one format.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.optim.adam import adam as _adam
from torch.optim.optimizer import required  # type: ignore[attr-defined]
from torch.optim.sgd import sgd as _sgd

from msprof_py.adapter import backend, shapes_only
from msprof_py.adapter.custom_ops import device_call, host, launch_kernel, state, wrap
from msprof_py.adapter.opcost import dtype_name
from msprof_py.adapter.tensors import set_storage_format, storage_format
from msprof_py.device.costmodel import vector_cost
from msprof_py.device.formats import storage_bytes

__all__ = ["NpuFusedAdam", "NpuFusedAdamW", "NpuFusedSGD"]

Closure = Callable[[], Any] | None


def _format(t: torch.Tensor) -> tuple[str, tuple[int, ...]] | None:
    fmt = storage_format(t)
    return fmt if fmt is not None and fmt[1] == tuple(t.shape) else None


def _stored_bytes(t: torch.Tensor) -> int:
    """Bytes ``t`` occupies as stored (private formats are padded)."""
    fmt = _format(t)
    if fmt is None:
        return t.numel() * t.element_size()
    return storage_bytes(fmt[1], dtype_name(t.dtype), fmt[0])


def _adopt_like(value: torch.Tensor, param: torch.Tensor, tag: str) -> torch.Tensor:
    """An npu tensor taking over the fresh host tensor ``value``, in ``param``'s format."""
    out = wrap(value, tag)
    fmt = _format(param)
    if fmt is not None:
        set_storage_format(out, fmt[0], fmt[1])
    return out


def _zeros_like(param: torch.Tensor, tag: str) -> torch.Tensor:
    return _adopt_like(
        torch.zeros_like(host(param), memory_format=torch.preserve_format), param, tag
    )


def _match_format(param: torch.Tensor, grad: torch.Tensor) -> None:
    """Bring ``grad`` into ``param``'s format (one TransData) when they differ."""
    want = _format(param)
    have = _format(grad)
    if (want and want[0]) != (have and have[0]):
        backend.transdata(state(), grad, want[0] if want is not None else "ND")


def _bump(tensors: Iterable[torch.Tensor]) -> None:
    """Tell autograd the tensors changed in place (their host views did the writing)."""
    torch.autograd.graph.increment_version(list(tensors))


class _FusedKernel:
    """Collects the tensors one fused update reads and writes, then launches it."""

    def __init__(self, ops_per_element: float) -> None:
        self.ops = ops_per_element
        self.elements = 0
        self.bytes = 0
        self.dtype = "float32"
        self._largest = -1
        self.inputs: list[torch.Tensor] = []
        self.outputs: list[torch.Tensor] = []

    def add(
        self,
        param: torch.Tensor,
        grad: torch.Tensor,
        states: Iterable[torch.Tensor],
        new_states: int = 0,
    ) -> None:
        """One parameter: its gradient is read, the parameter and its states read and written,
        and ``new_states`` states of the parameter's size written only (a first momentum)."""
        states = list(states)
        self.elements += param.numel()
        self.bytes += _stored_bytes(grad) + 2 * sum(_stored_bytes(t) for t in (param, *states))
        self.bytes += new_states * _stored_bytes(param)
        if param.numel() > self._largest:
            self._largest, self.dtype = param.numel(), dtype_name(param.dtype)
        self.inputs += [param, grad, *states]
        self.outputs += [param, *states]

    def launch(self, op_type: str, name: str) -> None:
        if not self.elements:
            return
        cost = vector_cost(
            state().npu.spec,
            elements=self.elements,
            dtype=self.dtype,
            bytes_moved=self.bytes,
            ops_per_element=self.ops,
        )
        launch_kernel(op_type, name, cost, self.inputs, self.outputs)
        _bump(self.outputs)


def _closure_loss(closure: Closure) -> Any:
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


def _adam_step(opt: torch.optim.Adam, closure: Closure, op_type: str) -> Any:
    """One fused Adam/AdamW update of every parameter with a gradient."""
    loss = _closure_loss(closure)
    name = type(opt).__name__
    with torch.no_grad(), device_call(f"torch_npu.optim.{type(opt).__name__}.step"):
        kernel = _FusedKernel(14.0)
        for group in opt.param_groups:
            params, grads, exp_avgs, exp_avg_sqs, max_sqs, steps = [], [], [], [], [], []
            amsgrad = group["amsgrad"]
            has_complex = False
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError(f"{name} does not support sparse gradients")
                has_complex |= torch.is_complex(p)
                st = opt.state[p]
                if len(st) == 0:
                    st["step"] = torch.tensor(0.0, dtype=torch.get_default_dtype())
                    st["exp_avg"] = _zeros_like(p, name)
                    st["exp_avg_sq"] = _zeros_like(p, name)
                    if amsgrad:
                        st["max_exp_avg_sq"] = _zeros_like(p, name)
                _match_format(p, p.grad)
                states = [st["exp_avg"], st["exp_avg_sq"]]
                if amsgrad:
                    states.append(st["max_exp_avg_sq"])
                    max_sqs.append(host(st["max_exp_avg_sq"]))
                params.append(host(p))
                grads.append(host(p.grad))
                exp_avgs.append(host(st["exp_avg"]))
                exp_avg_sqs.append(host(st["exp_avg_sq"]))
                steps.append(st["step"])
                kernel.add(p, p.grad, states)
            if not params:
                continue
            beta1, beta2 = group["betas"]
            _adam(
                params,
                grads,
                exp_avgs,
                exp_avg_sqs,
                max_sqs,
                steps,
                foreach=False,
                capturable=False,
                differentiable=False,
                fused=False,
                grad_scale=None,
                found_inf=None,
                has_complex=has_complex,
                decoupled_weight_decay=group.get("decoupled_weight_decay", False),
                amsgrad=amsgrad,
                beta1=beta1,
                beta2=beta2,
                lr=group["lr"],
                weight_decay=group["weight_decay"],
                eps=group["eps"],
                maximize=group.get("maximize", False),
            )
        kernel.launch(op_type, name)
    return loss


class _ClipGradNormFused:
    """torch_npu's ``clip_grad_norm_fused_`` on the fused optimizers."""

    param_groups: list[dict[str, Any]]

    def clip_grad_norm_fused_(self, max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
        """Scale all gradients in place so their total ``norm_type`` norm is at most
        ``max_norm``; return the total norm (an fp32 npu scalar).

        As torch_npu: one norm kernel over all gradients, the host reads the norm to decide,
        and one ``Mul`` kernel scales every gradient by ``max_norm / (norm + 1e-6)`` when that
        is below 1.
        """
        grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
        with torch.no_grad(), device_call("torch_npu.clip_grad_norm_fused_") as current:
            if not grads:
                return wrap(torch.zeros((), dtype=torch.float32, device=_host_device()), "clip")
            max_norm, norm_type = float(max_norm), float(norm_type)
            flat = torch.cat([host(g).float().abs().flatten() for g in grads])
            if norm_type == math.inf:
                total_h, op_type = flat.max(), "ReduceMax"
            else:
                total_h, op_type = flat.pow(norm_type).sum().pow(1 / norm_type), "LpNormV2"
            total = wrap(total_h.clone(), "clip_grad_norm_fused_")
            elements = sum(g.numel() for g in grads)
            nbytes = sum(_stored_bytes(g) for g in grads)
            spec = current.npu.spec
            cost = vector_cost(
                spec, elements=elements, dtype="float32", bytes_moved=nbytes + 4, ops_per_element=3
            )
            launch_kernel(op_type, "clip_grad_norm_fused_", cost, grads, [total])
            # the host reads the norm: `if clip_coef < 1`; on shapes only the norm reads as the
            # placeholder 0 (within bounds: no scaling), see msprof_py.adapter.shapes_only
            if current.meta:
                shapes_only.allow_placeholder("clip_grad_norm_fused_")
            backend.record_value_sync(current, "clip_grad_norm_fused_")
            clip_coef = max_norm / (total_h + 1e-6)
            if not current.meta and bool(clip_coef < 1):
                for g in grads:
                    host(g).mul_(clip_coef.to(g.dtype))
                cost = vector_cost(
                    spec, elements=elements, dtype=dtype_name(grads[0].dtype),
                    bytes_moved=2 * nbytes,
                )  # fmt: skip
                launch_kernel("Mul", "clip_grad_norm_fused_", cost, grads, grads)
                _bump(grads)
        return total


def _host_device() -> torch.device:
    return torch.device("meta") if state().meta else torch.device("cpu")


def _check_adam_args(
    lr: float, betas: tuple[float, float], eps: float, weight_decay: float
) -> None:
    if lr < 0.0:
        raise ValueError(f"Invalid learning rate: {lr}")
    if eps < 0.0:
        raise ValueError(f"Invalid epsilon value: {eps}")
    if not 0.0 <= betas[0] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
    if not 0.0 <= betas[1] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
    if weight_decay < 0.0:
        raise ValueError(f"Invalid weight_decay value: {weight_decay}")


class _FusedAdamStep:
    """The step of the fused Adam family: one ``_KERNEL`` kernel over all parameters."""

    _KERNEL: str

    def step(self, closure: Closure = None) -> Any:
        """Update every parameter that has a gradient with one kernel; return the closure's loss."""
        return _adam_step(self, closure, self._KERNEL)  # type: ignore[arg-type]


class NpuFusedAdamW(_FusedAdamStep, _ClipGradNormFused, torch.optim.AdamW):
    """AdamW whose step is one fused ``ApplyAdamW`` kernel over all parameters."""

    _KERNEL = "ApplyAdamW"

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
    ) -> None:
        _check_adam_args(lr, betas, eps, weight_decay)
        super().__init__(
            params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
            foreach=False,
        )  # fmt: skip


class NpuFusedAdam(_FusedAdamStep, _ClipGradNormFused, torch.optim.Adam):
    """Adam (L2 weight decay) whose step is one fused ``ApplyAdam`` kernel over all parameters."""

    _KERNEL = "ApplyAdam"

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        amsgrad: bool = False,
    ) -> None:
        _check_adam_args(lr, betas, eps, weight_decay)
        super().__init__(
            params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
            foreach=False,
        )  # fmt: skip


class NpuFusedSGD(_ClipGradNormFused, torch.optim.SGD):
    """SGD (momentum, dampening, nesterov, L2 weight decay) in one fused kernel per step.

    The kernel is ``ApplyMomentum`` when a group uses momentum, else ``ApplyGradientDescent``.
    ``lr`` is required, as in torch_npu.
    """

    def __init__(
        self,
        params: Any,
        lr: float = required,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
    ) -> None:
        if lr is required:
            raise ValueError("NpuFusedSGD needs a learning rate (lr)")
        if nesterov and (momentum <= 0.0 or not math.isclose(dampening, 0.0, abs_tol=1e-15)):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(
            params, lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
            nesterov=nesterov, foreach=False,
        )  # fmt: skip

    def step(self, closure: Closure = None) -> Any:  # type: ignore[override]
        """Update every parameter that has a gradient with one kernel; return the closure's loss."""
        loss = _closure_loss(closure)
        name = type(self).__name__
        with torch.no_grad(), device_call(f"torch_npu.optim.{name}.step"):
            momentum_used = any(g["momentum"] != 0 for g in self.param_groups)
            kernel = _FusedKernel(4.0 if momentum_used else 2.0)
            for group in self.param_groups:
                momentum = group["momentum"]
                params = [p for p in group["params"] if p.grad is not None]
                if not params:
                    continue
                bufs: list[torch.Tensor | None] = []
                for p in params:
                    _match_format(p, p.grad)
                    buf = self.state[p].get("momentum_buffer") if momentum != 0 else None
                    bufs.append(buf)
                    new = int(momentum != 0 and buf is None)  # a first buffer is written only
                    kernel.add(p, p.grad, [] if buf is None else [buf], new_states=new)
                host_bufs = [None if b is None else host(b) for b in bufs]
                _sgd(
                    [host(p) for p in params],
                    [host(p.grad) for p in params],
                    host_bufs if momentum != 0 else [],
                    has_sparse_grad=False,
                    foreach=False,
                    fused=False,
                    grad_scale=None,
                    found_inf=None,
                    weight_decay=group["weight_decay"],
                    momentum=momentum,
                    lr=group["lr"],
                    dampening=group["dampening"],
                    nesterov=group["nesterov"],
                    maximize=group.get("maximize", False),
                )
                if momentum != 0:
                    for p, old, new in zip(params, bufs, host_bufs, strict=True):
                        if old is None and new is not None:
                            created = _adopt_like(new, p, name)
                            self.state[p]["momentum_buffer"] = created
                            kernel.outputs.append(created)
            op_type = "ApplyMomentum" if momentum_used else "ApplyGradientDescent"
            kernel.launch(op_type, name)
        return loss
