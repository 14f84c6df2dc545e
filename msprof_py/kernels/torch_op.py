"""A DSL kernel as a PyTorch operator: ``register(name, kernel, ...)`` (torch.library).

    from msprof_py.kernels.torch_op import register

    scaled_add = register(
        "mylib::scaled_add", add_kernel, block_dim=8,
        shape_fn=lambda x, y: [(x.shape, x.dtype)],      # outputs: (shape, dtype) each
        tiling=lambda x, y: (x.numel(),),                 # extra kernel arguments
        backward=lambda inputs, outputs, grads: (grads[0], grads[0]),
    )
    z = scaled_add(x_npu, y_npu)                          # also torch.ops.mylib.scaled_add

The kernel is called as ``kernel(*inputs, *outputs, *tiling(*inputs))`` with numpy arrays (GM
tensors); it writes the outputs (``tiling`` may return arrays too: GM workspaces). On
``npu`` tensors the op

- computes its values with the DSL on the host views of its inputs (the simulator's numpy
  arithmetic, fp16 rounding included);
- launches ONE device task named after the op whose duration is the launch's simulated time
  (plus the device's scheduling overhead), with its block dim, task type (``AI_VECTOR_CORE``
  for a vector-only kernel, ``MIX_AIC`` when it uses the cube, ``AI_CORE`` on coupled chips),
  cube / vector / memory terms from the busiest core's pipes and its GM bytes and FLOPs
  (:mod:`roofline`). Costs are cached per input shapes and dtypes, tiling and chip;
- with ``numerics="none"`` (shapes only) runs the kernel once on zero arrays of the inputs'
  shapes to cost it (cached), and returns shape-only outputs.

``backward(inputs, outputs, grad_outputs) -> grad per input`` (None for no gradient) becomes
the op's autograd formula (torch.library.register_autograd); it runs ordinary torch ops, so on
npu tensors its kernels are costed like any others. On CPU tensors the op computes with the
DSL and launches nothing. This is the only module of :mod:`msprof_py.kernels` that imports
torch.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from msprof_py.device.costmodel import KernelCost, bound_of
from msprof_py.device.records import TaskType
from msprof_py.kernels.bf16 import BF16, is_bf16
from msprof_py.kernels.chip import Chip
from msprof_py.kernels.errors import KernelError
from msprof_py.kernels.launch import launch
from msprof_py.kernels.results import LaunchResult
from msprof_py.kernels.roofline import roofline

__all__ = ["KernelOp", "cost_of", "register"]

_NUMPY = {
    torch.bfloat16: BF16,
    torch.float16: np.float16,
    torch.float32: np.float32,
    torch.float64: np.float64,
    torch.int8: np.int8,
    torch.uint8: np.uint8,
    torch.int16: np.int16,
    torch.int32: np.int32,
    torch.int64: np.int64,
}

OutputSpec = Sequence[tuple[Sequence[int], torch.dtype]]


def cost_of(result: LaunchResult) -> KernelCost:
    """The device task of one launch: its simulated duration plus the scheduling overhead."""
    spec = result.chip.spec
    ns = result.chip.cycles_to_ns

    def busiest(*pipes: str) -> float:
        return max((ns(max(c.pipe_busy[p] for p in pipes)) for c in result.core_results),
                   default=0.0)  # fmt: skip

    cube, vector, memory = busiest("M"), busiest("V"), busiest("MTE2", "MTE3", "FIX")
    roof = roofline(result)
    if result.core_type == "aiv":
        task = TaskType.AI_VECTOR_CORE
    else:
        task = TaskType.MIX_AIC if result.core_type == "mix" else TaskType.AI_CORE
    sched = spec.dispatch.device_sched_ns
    return KernelCost(
        task_type=task,
        block_dim=result.block_dim,
        duration_ns=sched + round(result.duration_ns),
        sched_ns=sched,
        cube_ns=cube,
        vector_ns=vector,
        memory_ns=memory,
        waves=result.waves,
        bound=bound_of(sched, cube, vector, memory),
        flops=roof.cube_flops + roof.vector_ops,
        bytes=roof.gm_bytes,
    )


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    """A host tensor's values as numpy (bf16 as :data:`BF16` bit patterns, shared memory)."""
    if t.dtype is torch.bfloat16:
        return t.view(torch.int16).numpy().view(BF16)
    return t.numpy()


def _from_numpy(a: np.ndarray) -> torch.Tensor:
    """A numpy result as a torch tensor (BF16 arrays as torch.bfloat16)."""
    if is_bf16(a.dtype):
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def _np_dtype(dtype: torch.dtype, op: str) -> Any:
    try:
        return _NUMPY[dtype]
    except KeyError:
        raise KernelError(f"{op}: dtype {dtype} is not supported by the kernel simulator") from None


class KernelOp:
    """A registered kernel op; call it like a function (see module docstring)."""

    def __init__(
        self,
        name: str,
        kernel: Callable[..., Any],
        *,
        block_dim: int | Callable[..., int],
        shape_fn: Callable[..., OutputSpec],
        tiling: Callable[..., Sequence[Any]] | None = None,
        backward: Callable[..., Sequence[torch.Tensor | None]] | None = None,
        chip: str | None = None,
        strict_sync: bool = True,
        kernel_type: str | None = None,
    ) -> None:
        if "::" not in name:
            raise ValueError(f"register: name must be 'namespace::op', got {name!r}")
        self.name = name
        self.short_name = name.split("::", 1)[1]
        self.kernel = kernel
        self.block_dim = block_dim
        self.shape_fn = shape_fn
        self.tiling = tiling
        self.chip = chip
        self.strict_sync = strict_sync
        self.kernel_type = kernel_type
        self.n_inputs = len(inspect.signature(shape_fn).parameters)
        self._costs: dict[tuple, KernelCost] = {}
        #: launches simulated (values or cost), for tests and curiosity
        self.simulations = 0
        self._single = True
        args = ", ".join(f"Tensor x{i}" for i in range(self.n_inputs))
        self._op = torch.library.custom_op(
            name, self._impl, mutates_args=(), schema=f"({args}) -> Tensor[]"
        )
        self._op.register_fake(self._fake)
        if backward is not None:
            self._user_backward = backward
            self._op.register_autograd(self._backward, setup_context=self._setup)

    # ---- calling ---------------------------------------------------------------------------

    def __call__(self, *inputs: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        if len(inputs) != self.n_inputs:
            raise TypeError(f"{self.name}: takes {self.n_inputs} tensors, got {len(inputs)}")
        outs = self._op(*inputs)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _outputs(self, inputs: Sequence[torch.Tensor]) -> list[tuple[tuple[int, ...], Any]]:
        return [(tuple(int(d) for d in s), dt) for s, dt in self.shape_fn(*inputs)]

    def _fake(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        dev = inputs[0].device if inputs else None
        return [torch.empty(s, dtype=dt, device=dev) for s, dt in self._outputs(inputs)]

    def _launch(self, arrays: list[np.ndarray], outs: list[np.ndarray], inputs: Sequence) -> Any:
        extra = tuple(self.tiling(*inputs)) if self.tiling else ()
        bd = self.block_dim(*inputs) if callable(self.block_dim) else self.block_dim
        self.simulations += 1
        return launch(
            self.kernel,
            bd,
            *arrays,
            *outs,
            *extra,
            chip=self.chip,
            name=self.short_name,
            strict_sync=self.strict_sync,
            kernel_type=self.kernel_type,
        )

    def _key(self, inputs: Sequence[torch.Tensor]) -> tuple:
        extra = tuple(self.tiling(*inputs)) if self.tiling else ()
        described = tuple(
            ("array", a.shape, str(a.dtype)) if isinstance(a, np.ndarray) else repr(a)
            for a in extra
        )
        return (tuple((tuple(t.shape), t.dtype) for t in inputs), described, self.chip)

    def _impl(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        if not inputs or inputs[0].device.type != "npu":
            return self._run_host([t.detach().contiguous() for t in inputs])[0]
        from msprof_py.adapter import custom_ops

        with custom_ops.device_call(self.short_name) as state:
            if self.chip is None:
                self.chip = Chip.load(state.npu.spec).name
            key = self._key(inputs)
            if custom_ops.numerics_none():
                if key not in self._costs:
                    zeros = [torch.zeros(t.shape, dtype=t.dtype) for t in inputs]
                    self._costs[key] = self._run_host(zeros, inputs)[1]
                outputs = [
                    custom_ops.wrap(torch.empty(s, dtype=dt, device="meta"), self.short_name)
                    for s, dt in self._outputs(inputs)
                ]
            else:
                views = [custom_ops.host(t).detach().contiguous() for t in inputs]
                host_outs, cost = self._run_host(views, inputs)
                self._costs.setdefault(key, cost)
                outputs = [custom_ops.wrap(o, self.short_name) for o in host_outs]
            custom_ops.launch_kernel(
                self.short_name, self.short_name, self._costs[key], inputs, outputs
            )
        return outputs

    def _run_host(
        self, views: list[torch.Tensor], inputs: Sequence[torch.Tensor] | None = None
    ) -> tuple[list[torch.Tensor], KernelCost]:
        shapes_from = inputs if inputs is not None else views
        arrays = [_to_numpy(v) if v.dtype in _NUMPY else None for v in views]
        for v, a in zip(views, arrays, strict=True):
            if a is None:
                _np_dtype(v.dtype, self.name)
        outs = [np.zeros(s, dtype=_np_dtype(dt, self.name)) for s, dt in self._outputs(shapes_from)]
        result = self._launch(arrays, outs, shapes_from)  # type: ignore[arg-type]
        return [_from_numpy(o) for o in outs], cost_of(result)

    # ---- autograd --------------------------------------------------------------------------

    @staticmethod
    def _setup(ctx: Any, inputs: tuple, output: Any) -> None:
        ctx.n_inputs = len(inputs)
        ctx.save_for_backward(*inputs, *output)

    def _backward(self, ctx: Any, grads: Sequence[torch.Tensor]) -> tuple:
        saved = ctx.saved_tensors
        inputs, outputs = saved[: ctx.n_inputs], saved[ctx.n_inputs :]
        result = tuple(self._user_backward(inputs, outputs, tuple(grads)))
        if len(result) != ctx.n_inputs:
            raise RuntimeError(
                f"{self.name}: backward returned {len(result)} gradients for {ctx.n_inputs} inputs"
            )
        return result


def register(
    name: str,
    kernel: Callable[..., Any],
    *,
    block_dim: int | Callable[..., int],
    shape_fn: Callable[..., OutputSpec],
    tiling: Callable[..., Sequence[Any]] | None = None,
    backward: Callable[..., Sequence[torch.Tensor | None]] | None = None,
    chip: str | None = None,
    strict_sync: bool = True,
    kernel_type: str | None = None,
) -> KernelOp:
    """Register ``kernel`` as the torch operator ``name`` ("namespace::op"); see the module
    docstring for the calling convention, costing and autograd; ``strict_sync`` and
    ``kernel_type`` as in :func:`msprof_py.kernels.launch`)."""
    return KernelOp(
        name,
        kernel,
        block_dim=block_dim,
        shape_fn=shape_fn,
        tiling=tiling,
        backward=backward,
        chip=chip,
        strict_sync=strict_sync,
        kernel_type=kernel_type,
    )
