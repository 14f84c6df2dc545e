"""The recurrent ops on the npu: numerics as on CPU, kernels as the device runs them.

The values come from :mod:`msprof_py.adapter.host_ops`: each op runs as the CPU runs it,
so ``nn.RNN``, ``nn.LSTM`` (with ``proj_size``), ``nn.GRU`` and the cells give bitwise the
CPU's outputs, hidden states and gradients. This module plans their device kernels, following
what torch_npu launches:

* ``lstm`` (``nn.LSTM``): ONE fused ``DynamicRNN`` kernel per layer and direction (torch_npu
  lowers ``nn.LSTM`` to DynamicRNN), ``DynamicRNNGrad`` in the backward.
* ``gru`` (``nn.GRU``): ONE fused ``DynamicGRUV2`` kernel per layer and direction,
  ``DynamicGRUV2Grad`` in the backward.
* ``rnn_tanh`` / ``rnn_relu`` (``nn.RNN``): no fused kernel; ATen's composite for a non-CPU
  device, per time step and direction: ``MatMul`` (input projection), ``MatMul`` (hidden
  projection), ``Add``, ``Tanh``/``Relu``. Backward per step: the activation gradient and two
  ``MatMul`` (input and hidden gradients); per layer and direction one ``MatMul`` per weight
  gradient over all steps and a ``ReduceSum`` per bias.
* the cells (``nn.LSTMCell`` ...): ATen's composite for a non-CPU device: ``MatMul`` for the
  input and the hidden projection, then the fused gate kernel (``ThnnFusedLstmCell``,
  ``ThnnFusedGruCell``) or ``Add`` + activation for the RNN cells; backward the fused gate
  gradient (or the activation gradient and bias sums) and four ``MatMul``.

A fused kernel's cost: the input projection of the whole sequence is one GEMM (rows = all time
steps); then, step after step, the hidden projection GEMM (and the LSTM projection GEMM with
``proj_size``) followed by the gate math on the vector units, so per-step cube and vector time
add up (each step needs the previous one's result). Its FLOPs are those of its GEMMs
(``2 * rows * gates*hidden * (input + hidden)`` per layer and direction); its bytes are the
inputs, weights, outputs and, when autograd records the call, the gate activations saved for
the backward. The backward kernel does the matching GEMMs (hidden gradient per step; input
and weight gradients over the whole sequence) and the gate gradients.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence

import torch

from msprof_py.adapter.host_ops import Call, HostOp, Plan, Planner, Shape, Task
from msprof_py.adapter.opcost import TensorInfo, dtype_name, op_tasks
from msprof_py.device.costmodel import KernelCost, bound_of, matmul_cost, vector_cost
from msprof_py.device.dtypes import itemsize
from msprof_py.device.records import TaskType
from msprof_py.device.spec import DeviceSpec

#: vector instructions per gate element of one step (bias adds, sigmoids/tanh, the cell and
#: hidden updates spread over the gates) in the forward and in the backward
GATE_OPS = {"lstm": 9.0, "gru": 9.0}
GATE_GRAD_OPS = {"lstm": 12.0, "gru": 12.0}
#: gates per hidden unit
GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}
_FUSED = {"lstm": ("DynamicRNN", "DynamicRNNGrad"), "gru": ("DynamicGRUV2", "DynamicGRUV2Grad")}
_ACTIVATION = {"rnn_tanh": ("tanh", "tanh_backward"), "rnn_relu": ("relu", "threshold_backward")}


@dataclasses.dataclass(frozen=True, slots=True)
class Layer:
    """One layer and direction of a recurrent op."""

    rows: tuple[int, ...]  # batch rows of each time step, in order
    input: int  # input features
    hidden: int  # hidden size
    recurrent: int  # size of the recurrent state h (proj_size, or hidden)
    bias: bool
    proj: bool
    dtype: torch.dtype

    @property
    def total_rows(self) -> int:
        return sum(self.rows)


def layers_of(kind: str, call: Call) -> list[Layer]:
    """The layers and directions of a full-sequence recurrent op call."""
    args = call.args
    data = args["input"] if "input" in args else args["data"]
    params: Sequence[torch.Tensor] = args["params"]
    num_layers, directions = int(args["num_layers"]), 2 if args["bidirectional"] else 1
    if "batch_sizes" in args:
        rows = tuple(int(b) for b in args["batch_sizes"].tolist())
    elif args.get("batch_first"):
        rows = (data.shape[0],) * data.shape[1]
    else:
        rows = (data.shape[1],) * data.shape[0]
    per = len(params) // (num_layers * directions)
    dtype = call.outputs[0].dtype  # the compute dtype (autocast included)
    layers = []
    for i in range(num_layers * directions):
        w_ih, w_hh = params[i * per], params[i * per + 1]
        layers.append(
            Layer(
                rows=rows,
                input=w_ih.shape[1],
                hidden=w_ih.shape[0] // GATES[kind],
                recurrent=w_hh.shape[1],
                bias=bool(args["has_biases"]),
                proj=per in (3, 5),
                dtype=dtype,
            )
        )
    return layers


# ---- fused kernels (LSTM, GRU) ---------------------------------------------------------


def _gemm(spec: DeviceSpec, m: int, n: int, k: int, dtype: str) -> KernelCost:
    return matmul_cost(spec, m, n, k, dtype=dtype, bytes_moved=0)


def _serial(
    spec: DeviceSpec,
    dtype: str,
    rows: Sequence[int],
    per_step: Sequence[tuple[int, int]],
    vector_width: int,
    vector_ops: float,
) -> tuple[float, float, float, int]:
    """(cube ns, vector ns, FLOPs, block dim) of the sequential part: per step, GEMMs with
    ``rows`` x n x k for each ``(n, k)`` of ``per_step``, then the gate math on
    ``rows * vector_width`` elements."""
    cube = vector = flops = 0.0
    block = 1
    size = itemsize(dtype)
    for r, count in collections.Counter(rows).items():
        for n, k in per_step:
            step = _gemm(spec, r, n, k, dtype)
            cube += count * step.cube_ns
            flops += count * step.flops
            block = max(block, step.block_dim)
        elements = r * vector_width
        gate = vector_cost(
            spec,
            elements=elements,
            dtype=dtype,
            bytes_moved=2 * elements * size,
            ops_per_element=vector_ops,
        )
        vector += count * gate.vector_ns
    return cube, vector, flops, block


def _fused_cost(
    spec: DeviceSpec,
    dtype: str,
    rows: Sequence[int],
    parallel: Sequence[tuple[int, int, int]],
    per_step: Sequence[tuple[int, int]],
    vector_width: int,
    vector_ops: float,
    nbytes: int,
) -> KernelCost:
    """One fused recurrent kernel: ``parallel`` GEMMs (m, n, k) over the whole sequence,
    then step after step the ``per_step`` GEMMs and the gate math."""
    first, *rest = parallel
    base = matmul_cost(spec, *first, dtype=dtype, bytes_moved=nbytes)
    cube, flops = base.cube_ns, base.flops
    for m, n, k in rest:
        extra = _gemm(spec, m, n, k, dtype)
        cube += extra.cube_ns
        flops += extra.flops
    s_cube, s_vector, s_flops, s_block = _serial(
        spec, dtype, rows, per_step, vector_width, vector_ops
    )
    cube += s_cube
    flops += s_flops
    sched = base.sched_ns
    busy = cube + s_vector  # each step's gate math waits for its GEMM, the next GEMM for it
    return dataclasses.replace(
        base,
        task_type=TaskType.MIX_AIC if spec.a2_class else TaskType.AI_CORE,
        block_dim=max(base.block_dim, s_block),
        cube_ns=cube,
        vector_ns=s_vector,
        duration_ns=sched + round(max(busy, base.memory_ns)),
        bound=bound_of(sched, cube, s_vector, base.memory_ns),
        flops=flops,
    )


def _fused_layer_bytes(kind: str, layer: Layer, training: bool) -> int:
    """HBM bytes of one fused forward kernel: inputs, weights, outputs (+ saved gates)."""
    n, g = layer.total_rows, GATES[kind] * layer.hidden
    batch = max(layer.rows)
    h, r, i = layer.hidden, layer.recurrent, layer.input
    elements = n * i + g * (i + r) + batch * r + n * r + batch * r  # x, W, h0, y, h_n
    if layer.bias:
        elements += 2 * g
    if layer.proj:
        elements += r * h
    if kind == "lstm":
        elements += 2 * batch * h  # c0, c_n
    if training:
        elements += saved_elements(kind, layer)
    return elements * layer.dtype.itemsize


def saved_elements(kind: str, layer: Layer) -> int:
    """Elements one layer and direction keeps for the backward beyond its outputs: the gate
    activations of every step, and LSTM's cell state and tanh(c) (RNN: the hidden states)."""
    n, h = layer.total_rows, layer.hidden
    if kind not in GATE_OPS:
        return n * h
    return n * GATES[kind] * h + (2 * n * h if kind == "lstm" else n * h)


def fused_layer_tasks(spec: DeviceSpec, kind: str, layer: Layer, training: bool) -> Plan:
    """The fused forward and backward kernel of one LSTM/GRU layer and direction."""
    forward_type, backward_type = _FUSED[kind]
    dtype = dtype_name(layer.dtype)
    g = GATES[kind] * layer.hidden
    n, i, h, r = layer.total_rows, layer.input, layer.hidden, layer.recurrent
    step = [(g, r)] + ([(r, h)] if layer.proj else [])
    nbytes = _fused_layer_bytes(kind, layer, training)
    cost = _fused_cost(spec, dtype, layer.rows, [(n, g, i)], step, g, GATE_OPS[kind], nbytes)
    x: Shape = ((n, i), layer.dtype)
    w: tuple[Shape, ...] = (((g, i), layer.dtype), ((g, r), layer.dtype))
    y: Shape = ((n, r), layer.dtype)
    forward = (Task(forward_type, cost, (x, *w), (y,)),)
    # backward: dh through each step (and the projection); dx, dW_ih, dW_hh (, dW_hr) at once
    back_step = [(r, g)] + ([(h, r)] if layer.proj else [])
    parallel = [(n, i, g), (g, i, n), (g, r, n)] + ([(r, h, n)] if layer.proj else [])
    back_bytes = 2 * _fused_layer_bytes(kind, layer, True)
    back = _fused_cost(
        spec, dtype, layer.rows, parallel, back_step, g, GATE_GRAD_OPS[kind], back_bytes
    )
    backward = (Task(backward_type, back, (y, x, *w), (x, *w)),)
    return Plan(forward, backward)


def _fused_planner(kind: str) -> Planner:
    def planner(spec: DeviceSpec, call: Call) -> Plan:
        forward: list[Task] = []
        backward: list[Task] = []
        saved = 0
        for layer in layers_of(kind, call):
            plan = fused_layer_tasks(spec, kind, layer, call.training)
            forward.extend(plan.forward)
            backward[:0] = plan.backward  # the backward runs the layers in reverse
            saved += saved_elements(kind, layer) * layer.dtype.itemsize
        return Plan(tuple(forward), tuple(backward), saved)

    return planner


# ---- per-step kernels (RNN, cells) -----------------------------------------------------


def _tasks(spec: DeviceSpec, base: str, ins: Sequence[Shape], outs: Sequence[Shape]) -> list[Task]:
    """The kernels the plain ATen op ``base`` launches on these shapes (as the fallback would)."""
    planned = op_tasks(
        spec,
        base,
        [TensorInfo(s, d) for s, d in ins],
        [TensorInfo(s, d) for s, d in outs],
    )
    return [Task(p.op_type, p.cost, tuple(ins), tuple(outs)) for p in planned]


def _projection(
    spec: DeviceSpec, rows: int, k: int, n: int, bias: bool, dtype: torch.dtype
) -> list[Task]:
    """``linear(x, W, b)`` of ``rows`` x ``k`` inputs to ``n`` features: addmm (mm without b)."""
    x, w_t, y = ((rows, k), dtype), ((k, n), dtype), ((rows, n), dtype)
    if bias:
        return _tasks(spec, "addmm", [((n,), dtype), x, w_t], [y])
    return _tasks(spec, "mm", [x, w_t], [y])


def simple_step_tasks(
    spec: DeviceSpec, kind: str, rows: int, layer: Layer
) -> tuple[list[Task], list[Task]]:
    """Forward and backward kernels of one RNN (tanh/relu) time step."""
    d, h, i = layer.dtype, layer.hidden, layer.input
    act, act_grad = _ACTIVATION[kind]
    y: Shape = ((rows, h), d)
    forward = [
        *_projection(spec, rows, i, h, layer.bias, d),
        *_projection(spec, rows, h, h, layer.bias, d),
        *_tasks(spec, "add", [y, y], [y]),
        *_tasks(spec, act, [y], [y]),
    ]
    backward = [
        *_tasks(spec, act_grad, [y, y], [y]),
        *_tasks(spec, "mm", [y, ((h, h), d)], [y]),  # dh_{t-1}
        *_tasks(spec, "mm", [y, ((h, i), d)], [((rows, i), d)]),  # dx_t
    ]
    return forward, backward


def _weight_grads(
    spec: DeviceSpec, n: int, g: int, ks: Sequence[int], d: torch.dtype
) -> list[Task]:
    """dW = dgates^T @ inputs over ``n`` rows, for each weight with ``k`` input features."""
    return [t for k in ks for t in _tasks(spec, "mm", [((g, n), d), ((n, k), d)], [((g, k), d)])]


def _bias_grads(spec: DeviceSpec, n: int, g: int, d: torch.dtype) -> list[Task]:
    return [t for _ in range(2) for t in _tasks(spec, "sum", [((n, g), d)], [((g,), d)])]


def _simple_planner(kind: str) -> Planner:
    def planner(spec: DeviceSpec, call: Call) -> Plan:
        forward: list[Task] = []
        backward: list[Task] = []
        saved = 0
        for layer in layers_of(kind, call):
            steps = [simple_step_tasks(spec, kind, r, layer) for r in layer.rows]
            forward.extend(t for f, _ in steps for t in f)
            back = [t for _, b in reversed(steps) for t in b]
            n, h = layer.total_rows, layer.hidden
            back += _weight_grads(spec, n, h, (layer.input, h), layer.dtype)
            if layer.bias:
                back += _bias_grads(spec, n, h, layer.dtype)
            backward[:0] = back
            saved += saved_elements(kind, layer) * layer.dtype.itemsize
        return Plan(tuple(forward), tuple(backward), saved)

    return planner


def _cell_planner(kind: str) -> Planner:
    def planner(spec: DeviceSpec, call: Call) -> Plan:
        args = call.args
        x, w_ih, w_hh = args["input"], args["w_ih"], args["w_hh"]
        d = call.outputs[0].dtype
        rows = x.shape[0] if x.dim() == 2 else 1
        g, i, h = w_ih.shape[0], w_ih.shape[1], w_hh.shape[1]
        bias = args.get("b_ih") is not None
        if kind in _ACTIVATION:
            layer = Layer((rows,), i, h, h, bias, False, d)
            forward, backward = simple_step_tasks(spec, kind, rows, layer)
            backward += _weight_grads(spec, rows, g, (i, h), d)
            if bias:
                backward += _bias_grads(spec, rows, g, d)
            return Plan(tuple(forward), tuple(backward), rows * h * d.itemsize)
        gates: Shape = ((rows, g), d)
        state: Shape = ((rows, h), d)
        size = d.itemsize
        outs = (state, state) if kind == "lstm" else (state,)
        ins = [gates, gates, state] + ([((g,), d), ((g,), d)] if bias else [])
        elements = 2 * rows * g + rows * h + (2 * g if bias else 0) + len(outs) * rows * h
        if call.training:
            elements += rows * g  # the workspace the backward reads
        name = "ThnnFused" + ("LstmCell" if kind == "lstm" else "GruCell")
        cell = vector_cost(
            spec,
            elements=rows * g,
            dtype=dtype_name(d),
            bytes_moved=elements * size,
            ops_per_element=GATE_OPS[kind],
        )
        forward = [
            *_tasks(spec, "mm", [((rows, i), d), ((i, g), d)], [gates]),
            *_tasks(spec, "mm", [state, ((h, g), d)], [gates]),
            Task(name, cell, tuple(ins), outs),
        ]
        grad = vector_cost(
            spec,
            elements=rows * g,
            dtype=dtype_name(d),
            bytes_moved=(elements + rows * g) * size,
            ops_per_element=GATE_GRAD_OPS[kind],
        )
        backward = [
            Task(name + "Backward", grad, (*outs, gates), (gates, state)),
            *_tasks(spec, "mm", [gates, ((g, i), d)], [((rows, i), d)]),  # dx
            *_tasks(spec, "mm", [gates, ((g, h), d)], [state]),  # dh
            *_weight_grads(spec, rows, g, (i, h), d),
        ]
        return Plan(tuple(forward), tuple(backward), rows * g * size)  # the workspace

    return planner


def host_ops() -> list[HostOp]:
    """The recurrent ops the npu runs on the host, with their planners."""
    hops = []
    for kind in ("lstm", "gru", "rnn_tanh", "rnn_relu"):
        planner = _fused_planner(kind) if kind in _FUSED else _simple_planner(kind)
        hops.append(HostOp(f"{kind}.input", planner))
        hops.append(HostOp(f"{kind}.data", planner, frozenset({"batch_sizes"})))
        hops.append(HostOp(f"{kind}_cell", _cell_planner(kind)))
    return hops
