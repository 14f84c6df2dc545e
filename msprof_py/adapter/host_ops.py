"""Composite ops the npu runs exactly as the CPU runs them: the whole op on the host views.

Some CompositeImplicitAutograd ops take another path on a non-CPU device than on CPU. The
recurrent ops (``aten::lstm``, ``gru``, ``rnn_tanh``, ``rnn_relu`` and their cells) call the
fused cell kernels (``_thnn_fused_lstm_cell`` ...), which have no CPU kernel, and project
the inputs step by step where the CPU projects the whole sequence in one GEMM (and runs LSTM
through oneDNN's ``mkldnn_rnn_layer``), so even ``nn.RNN`` rounds differently.
``scaled_dot_product_attention`` picks its fused backend from a per-device choice that has no
npu entry and falls to the math path, where the CPU runs its flash kernel.

For each such op a :class:`HostOp` registers one kernel on AutogradPrivateUse1 (and on
PrivateUse1, reached when autograd is off, e.g. in inference mode). It runs the whole op on
the host views of its npu inputs - the CPU composite, so the CPU's own path choice, kernels
and, for backward, its autograd graph (under CPU autocast when npu autocast is on) - adopts
the results as npu tensors and launches the kernels the device would run, as planned by the
op's planner. Gradients come from ``torch.autograd.grad`` over the host graph, so forward
values and gradients are bitwise what the same module computes on CPU. Double backward
through these ops is not supported.

Under a Python dispatch mode or with tensor subclasses (FakeTensor while compiling, ...),
the kernel runs torch's own decomposition instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.autograd.function import once_differentiable
from torch.utils._python_dispatch import _get_current_dispatch_mode

from msprof_py.adapter import backend, runtime
from msprof_py.adapter.custom_ops import device_call
from msprof_py.adapter.tensors import adopt, hold_workspace, host_view, is_npu_device
from msprof_py.device.costmodel import KernelCost
from msprof_py.device.spec import DeviceSpec

#: (shape, dtype) of a tensor a task reads or writes, for its record
Shape = tuple[tuple[int, ...], torch.dtype]


@dataclass(frozen=True, slots=True)
class Task:
    """One kernel a host op launches on the device."""

    op_type: str
    cost: KernelCost
    inputs: tuple[Shape, ...] = ()
    outputs: tuple[Shape, ...] = ()


@dataclass(frozen=True, slots=True)
class Plan:
    """The kernels of one call: launched by the forward, and by its backward."""

    forward: tuple[Task, ...]
    backward: tuple[Task, ...] = ()
    #: device memory the kernels keep for the backward beyond the outputs (gate activations,
    #: softmax statistics): held while autograd keeps the call
    saved_bytes: int = 0


@dataclass(frozen=True, slots=True)
class Call:
    """One call of a host op as its planner sees it."""

    #: argument name -> value (npu tensors, lists of them, scalars), defaults filled in
    args: dict[str, Any]
    #: the op's npu results
    outputs: tuple[torch.Tensor, ...]
    #: autograd records the call (plan the backward and the saved intermediates)
    training: bool


Planner = Callable[[DeviceSpec, Call], Plan]


@dataclass(frozen=True, slots=True)
class HostOp:
    """An ATen op (``"lstm.input"``) the npu runs on the host, and the planner of its kernels."""

    name: str
    planner: Planner
    #: arguments that are CPU tensors on every device (``batch_sizes`` of a packed sequence)
    cpu_args: frozenset[str] = frozenset()

    @property
    def label(self) -> str:
        """The host op name: ``aten::lstm``."""
        return "aten::" + self.name.split(".", 1)[0]


def bind(op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The call's arguments by name, with the schema's defaults filled in."""
    bound: dict[str, Any] = {}
    for i, arg in enumerate(op._schema.arguments):
        if i < len(args):
            bound[arg.name] = args[i]
        elif arg.name in kwargs:
            bound[arg.name] = kwargs[arg.name]
        elif arg.has_default_value():
            bound[arg.name] = arg.default_value
    return bound


def shape(t: torch.Tensor) -> Shape:
    """(shape, dtype) of a tensor, for a :class:`Task`."""
    return tuple(t.shape), t.dtype


# ---- plans kept per call metadata ------------------------------------------------------------

#: plans already made, by what a planner reads (:func:`_plan_key`): a planner costs the kernels
#: of a call from its metadata alone (an SDPA's math path is eight kernels with GEMM tilings,
#: about 0.6 ms of Python), and a training loop calls it with the same shapes every step. Each
#: entry also holds the device spec it was made for, so that the spec's ``id`` in its key
#: cannot be reused by another spec while the entry lives
_PLANS: dict[tuple, tuple[DeviceSpec, Plan]] = {}
#: the table is emptied when it holds this many (a program whose shapes never repeat)
PLAN_LIMIT = 2048


class _Unkeyed(Exception):
    """An argument of a kind :func:`_plan_key` does not key by: plan the call afresh."""


def _meta(value: Any, by_value: bool) -> Any:
    """What a planner may read of argument ``value``: a tensor's shape, strides, dtype and
    device (its values too where ``by_value``: a CPU argument such as a packed sequence's
    ``batch_sizes``), the same of each item of a list, a plain scalar by type and value (as
    :mod:`meta_cache` keys them: ``True``, ``1`` and ``1.0`` apart)."""
    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided or value.is_nested:
            raise _Unkeyed  # no strides to key by
        if by_value:
            return ("values", value.dtype, tuple(value.shape), tuple(value.reshape(-1).tolist()))
        return (tuple(value.shape), value.stride(), value.dtype, value.device.type)
    if isinstance(value, (list, tuple)):
        return tuple(_meta(v, by_value) for v in value)
    if value is None or isinstance(value, (bool, int, float, str, torch.dtype)):
        return type(value), value
    raise _Unkeyed


def _plan_key(hop: HostOp, spec: DeviceSpec, call: Call) -> tuple | None:
    """The key ``hop``'s plan of ``call`` on ``spec`` is kept by (None: not kept)."""
    try:
        args = tuple((name, _meta(v, name in hop.cpu_args)) for name, v in call.args.items())
        outputs = tuple(_meta(t, False) for t in call.outputs)
    except _Unkeyed:
        return None
    return id(spec), hop.name, call.training, args, outputs


def plan_of(hop: HostOp, spec: DeviceSpec, call: Call) -> Plan:
    """``hop``'s plan of ``call`` on ``spec``: the one made for a call with the same metadata
    on the same spec, else a new one (kept)."""
    key = _plan_key(hop, spec, call)
    if key is None:
        return hop.planner(spec, call)
    found = _PLANS.get(key)
    if found is not None:
        return found[1]
    plan = hop.planner(spec, call)
    if len(_PLANS) >= PLAN_LIMIT:
        _PLANS.clear()
    _PLANS[key] = (spec, plan)
    return plan


# ---- running on the host -----------------------------------------------------------------


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            if isinstance(v, torch.Tensor):
                yield v


def _flatten(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    flat: list[torch.Tensor] = []
    for v in (*args, *kwargs.values()):
        flat.extend(_tensors(v))
    return flat


def _rebuild(args: tuple, kwargs: dict, new: Sequence[Any]) -> tuple[tuple, dict]:
    """``args`` and ``kwargs`` with their tensors replaced, in :func:`_flatten` order."""
    it = iter(new)

    def swap(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return next(it)
        if isinstance(v, (list, tuple)) and any(isinstance(x, torch.Tensor) for x in v):
            return type(v)(next(it) if isinstance(x, torch.Tensor) else x for x in v)
        return v

    new_args = tuple(swap(a) for a in args)
    return new_args, {k: swap(v) for k, v in kwargs.items()}


def _host_autocast() -> contextlib.AbstractContextManager:
    """CPU autocast with the npu autocast dtype while npu autocast is on."""
    if torch.is_autocast_enabled("npu"):
        return torch.autocast("cpu", dtype=torch.get_autocast_dtype("npu"))
    return contextlib.nullcontext()


def _own(t: torch.Tensor, keep: Sequence[torch.Tensor]) -> torch.Tensor:
    """``t``, or a copy of it when it shares storage with an input or holds extra storage
    (an npu tensor takes over its host tensor's whole storage)."""
    storage = t.untyped_storage()
    if t.device.type == "meta":
        return t
    ptr = storage.data_ptr()
    shared = any(k.untyped_storage().data_ptr() == ptr for k in keep if k.device == t.device)
    if shared or storage.nbytes() != t.numel() * t.element_size() or not t.is_contiguous():
        return t.clone(memory_format=torch.contiguous_format)
    return t


def _as_tuple(result: Any) -> tuple[torch.Tensor, ...]:
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def _launch(state: runtime.AdapterState, name: str, tasks: Sequence[Task]) -> None:
    for task in tasks:
        backend.launch_shapes(state, name, task.op_type, task.cost, task.inputs, task.outputs)


@dataclass(frozen=True, slots=True)
class _Pending:
    """What the autograd function needs to run one host op call."""

    hop: HostOp
    op: torch._ops.OpOverload
    args: tuple
    kwargs: dict


class _HostFunction(torch.autograd.Function):
    """The autograd node of a host op call: the host graph does the differentiation."""

    @staticmethod
    def forward(ctx: Any, pending: _Pending, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:  # type: ignore[override]
        hop = pending.hop
        needs = ctx.needs_input_grad[1:]
        with device_call(hop.label, pending.args) as state:
            leaves: list[torch.Tensor | None] = []
            hosted: list[torch.Tensor] = []
            for t, need in zip(tensors, needs, strict=True):
                if is_npu_device(t.device):
                    view = host_view(t)
                    if need:
                        view = view.detach().requires_grad_(True)
                    leaves.append(view if need else None)
                    hosted.append(view)
                else:
                    leaves.append(None)
                    hosted.append(t)
            args, kwargs = _rebuild(pending.args, pending.kwargs, hosted)
            with torch.enable_grad(), _host_autocast():
                results = _as_tuple(pending.op(*args, **kwargs))
            outputs = tuple(adopt(_own(r, hosted), state, hop.label) for r in results)
            call = Call(bind(pending.op, pending.args, pending.kwargs), outputs, True)
            plan = plan_of(hop, state.npu.spec, call)
            _launch(state, hop.label, plan.forward)
            ctx.workspace = hold_workspace(plan.saved_bytes, state, hop.label + " (saved)")
        ctx.hop = hop  # not the arguments: autograd keeps only what the backward needs
        ctx.plan = plan
        ctx.host_results = results
        ctx.leaves = leaves
        ctx.save_for_backward(*outputs)  # an in-place change of an output fails the backward
        ctx.set_materialize_grads(False)
        return outputs

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[Any, ...]:  # type: ignore[override]
        ctx.saved_tensors  # noqa: B018 - checks the outputs' versions
        hop: HostOp = ctx.hop
        leaves: list[torch.Tensor | None] = ctx.leaves
        pairs = [
            (r, host_view(g))
            for r, g in zip(ctx.host_results, grads, strict=True)
            if g is not None and r.requires_grad
        ]
        wanted = [leaf for leaf in leaves if leaf is not None]
        out: list[torch.Tensor | None] = [None] * len(leaves)
        if not pairs or not wanted:
            return (None, *out)
        name = hop.label + "_backward"
        with device_call(name, ()) as state:
            found = torch.autograd.grad(
                [r for r, _ in pairs],
                wanted,
                [g for _, g in pairs],
                allow_unused=True,
                retain_graph=True,  # the host graph lives as long as this node
            )
            it = iter(found)
            keep = [g for _, g in pairs] + wanted
            for i, leaf in enumerate(leaves):
                if leaf is not None:
                    g = next(it)
                    out[i] = None if g is None else adopt(_own(g, keep), state, name)
            _launch(state, name, ctx.plan.backward)
        return (None, *out)


def _plain(t: torch.Tensor) -> bool:
    return type(t) is torch.Tensor or type(t) is torch.nn.Parameter


def _check_devices(hop: HostOp, op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> None:
    bound = bind(op, args, kwargs)
    for name, value in bound.items():
        if name in hop.cpu_args:
            continue
        for t in _tensors(value):
            if not is_npu_device(t.device):
                raise RuntimeError(backend.MISMATCH)


def run(hop: HostOp, op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> Any:
    """Run one call of ``hop`` on the host; the npu results (with autograd when needed)."""
    flat = _flatten(args, kwargs)
    if _get_current_dispatch_mode() is not None or not all(_plain(t) for t in flat):
        from msprof_py.adapter import sdpa_graph

        if op is sdpa_graph._SDPA:
            return sdpa_graph.trace(args, kwargs)  # one node in a compiled graph, or a miss
        return op.decompose(*args, **kwargs)
    _check_devices(hop, op, args, kwargs)
    single = len(op._schema.returns) == 1
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in flat)
    if grad:
        outputs = _HostFunction.apply(_Pending(hop, op, args, kwargs), *flat)
        return outputs[0] if single else tuple(outputs)
    with device_call(hop.label, args) as state:
        hosted = [host_view(t) if is_npu_device(t.device) else t for t in flat]
        host_args, host_kwargs = _rebuild(args, kwargs, hosted)
        with _host_autocast():
            results = _as_tuple(op(*host_args, **host_kwargs))
        outputs = tuple(adopt(_own(r, hosted), state, hop.label) for r in results)
        plan = plan_of(hop, state.npu.spec, Call(bind(op, args, kwargs), outputs, False))
        _launch(state, hop.label, plan.forward)
    return outputs[0] if single else outputs


def kernel_for(hop: HostOp, op: torch._ops.OpOverload) -> Callable[..., Any]:
    """The dispatcher kernel running ``op`` as ``hop``."""

    def kernel(*args: Any, **kwargs: Any) -> Any:
        return run(hop, op, args, kwargs)

    return kernel


def register(impl: torch.library.Library, hops: Sequence[HostOp]) -> None:
    """Register ``hops`` on AutogradPrivateUse1 and PrivateUse1 in ``impl`` (an aten IMPL)."""
    for hop in hops:
        packet, _, overload = hop.name.partition(".")
        op = getattr(getattr(torch.ops.aten, packet), overload or "default")
        kernel = kernel_for(hop, op)
        impl.impl(hop.name, kernel, "AutogradPrivateUse1")
        impl.impl(hop.name, kernel, "PrivateUse1")
