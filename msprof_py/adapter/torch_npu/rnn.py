"""``torch_npu.npu_lstm``: a whole LSTM sequence as ONE fused ``DynamicRNN`` kernel.

torch_npu documents ``npu_lstm(x, weight, bias, seqMask, h, c, has_biases, num_layers,
dropout, train, bidirectional, batch_first, flag_seq, direction)`` as computing DynamicRNN:
one kernel for the whole sequence, single layer only. This is a documented subset of it:

* ``x``: ``(T, B, I)`` (``(B, T, I)`` with ``batch_first``); ``h``, ``c``: the initial states,
  ``(1, B, H)`` or ``(B, H)``.
* ``weight``: ``(I + H, 4H)``, the input and hidden weights of ``nn.LSTM`` side by side and
  transposed: ``torch.cat([weight_ih, weight_hh], 1).t()``; ``bias``: ``(4H,)``, ``bias_ih +
  bias_hh``. Gates in PyTorch's order (input, forget, cell, output).
* ``seqMask``: with ``flag_seq=True``, ``(T, B)`` or ``(T, B, H)`` of 1 (a valid step) and 0
  (padding): at a padded step the states carry over unchanged and ``y`` is 0, so the last
  states of a sequence of length L are those of step L, as with a packed ``nn.LSTM``.
* ``num_layers`` must be 1 and ``bidirectional``/``direction`` False; ``dropout`` does
  nothing on one layer; ``train`` plans the activations the backward keeps.
* Returns ``(y, h, c, i, j, f, o, tanhc)``, each ``(T, B, H)``: the outputs, the hidden and
  cell states of every step, the gate activations (``j`` is the cell candidate) and
  ``tanh(c)``.

The values are computed on the host views with the LSTM equations (fp16/bf16 in fp32, cast
back), so they equal ``nn.LSTM`` on CPU with the same weights up to float rounding of the op
order. The device runs one ``DynamicRNN`` kernel costed as :func:`~msprof_py.adapter.recurrent.
fused_layer_tasks` costs ``nn.LSTM``'s (the whole padded batch at every step: a mask saves no
work), and the backward one ``DynamicRNNGrad``. The kernel's key holds ``T``: in
``jit_compile=True`` mode every new sequence length compiles again
(:mod:`msprof_py.adapter.compile_cache`).
"""

from __future__ import annotations

from typing import Any

import torch

from msprof_py.adapter import backend
from msprof_py.adapter.custom_ops import device_call, host, wrap
from msprof_py.adapter.recurrent import Layer, fused_layer_tasks
from msprof_py.adapter.runtime import AdapterState

__all__ = ["npu_lstm"]

_NAME = "torch_npu.npu_lstm"
_HALF = (torch.float16, torch.bfloat16)
_OUTPUTS = 8


def _reference(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    mask: torch.Tensor | None,
    h0: torch.Tensor,
    c0: torch.Tensor,
) -> tuple[torch.Tensor, ...]:
    """The LSTM equations over ``x`` (T, B, I): the eight ``npu_lstm`` outputs."""
    dtype = x.dtype
    work = torch.float32 if dtype in _HALF else dtype
    x, weight, h, c = x.to(work), weight.to(work), h0.to(work), c0.to(work)
    inputs = x.shape[-1]
    projected = x @ weight[:inputs]  # the input projection of every step in one GEMM
    if bias is not None:
        projected = projected + bias.to(work)
    w_h = weight[inputs:]
    names = ("y", "h", "c", "i", "j", "f", "o", "tanhc")
    steps: dict[str, list[torch.Tensor]] = {n: [] for n in names}
    for t in range(x.shape[0]):
        gates = projected[t] + h @ w_h
        i, f, j, o = gates.chunk(4, dim=-1)
        i, f, j, o = torch.sigmoid(i), torch.sigmoid(f), torch.tanh(j), torch.sigmoid(o)
        c_new = f * c + i * j
        tanhc = torch.tanh(c_new)
        h_new = o * tanhc
        if mask is not None:
            m = mask[t].to(work)
            m = m.unsqueeze(-1) if m.dim() == 1 else m
            h_new = m * h_new + (1 - m) * h
            c_new = m * c_new + (1 - m) * c
            y = m * h_new
        else:
            y = h_new
        h, c = h_new, c_new
        for name, value in zip(names, (y, h, c, i, j, f, o, tanhc), strict=True):
            steps[name].append(value)
    return tuple(torch.stack(steps[n]).to(dtype) for n in names)


def _layer(x: torch.Tensor, hidden: int, has_bias: bool) -> Layer:
    steps, batch, inputs = x.shape
    return Layer((batch,) * steps, inputs, hidden, hidden, has_bias, False, x.dtype)


def _launch(state: AdapterState, tasks: tuple) -> None:
    for task in tasks:
        backend.launch_shapes(state, _NAME, task.op_type, task.cost, task.inputs, task.outputs)


class _Lstm(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        layer: Layer,
        training: bool,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        mask: torch.Tensor | None,
        h0: torch.Tensor,
        c0: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        with device_call(_NAME) as state:
            views = [None if t is None else host(t) for t in (x, weight, bias, mask, h0, c0)]
            results = _reference(*views)
            outputs = tuple(wrap(r.contiguous(), _NAME) for r in results)
            plan = fused_layer_tasks(state.npu.spec, "lstm", layer, training)
            _launch(state, plan.forward)
        ctx.plan = plan
        ctx.save_for_backward(x, weight, bias, mask, h0, c0)
        ctx.mark_non_differentiable(*outputs[3:])
        ctx.set_materialize_grads(False)
        return outputs

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[Any, ...]:  # type: ignore[override]
        saved = ctx.saved_tensors
        needs = ctx.needs_input_grad[2:]
        used = [(k, g) for k, g in enumerate(grads[:3]) if g is not None]
        result: list[torch.Tensor | None] = [None] * len(saved)
        if not used:
            return (None, None, *result)
        with device_call(_NAME + "_grad") as state:
            leaves = [
                None if t is None else host(t).detach().requires_grad_(bool(need))
                for t, need in zip(saved, needs, strict=True)
            ]
            wanted = [leaf for leaf in leaves if leaf is not None and leaf.requires_grad]
            if wanted:
                with torch.enable_grad():
                    outs = _reference(*leaves)
                found = torch.autograd.grad(
                    [outs[k] for k, _ in used],
                    wanted,
                    [host(g) for _, g in used],
                    allow_unused=True,
                )
                it = iter(found)
                for n, leaf in enumerate(leaves):
                    if leaf is not None and leaf.requires_grad:
                        g = next(it)
                        g = torch.zeros_like(leaf) if g is None else g.to(leaf.dtype)
                        result[n] = wrap(g.contiguous().clone(), _NAME + "_backward")
            _launch(state, ctx.plan.backward)
        return (None, None, *result)


def _check(x: torch.Tensor, weight: torch.Tensor, h: torch.Tensor, c: torch.Tensor) -> int:
    for name, t in (("x", x), ("weight", weight), ("h", h), ("c", c)):
        if not isinstance(t, torch.Tensor) or t.device.type != "npu":
            where = t.device if isinstance(t, torch.Tensor) else type(t).__name__
            raise RuntimeError(f"npu_lstm: {name} must be an npu tensor, got {where}")
    if x.dim() != 3:
        raise ValueError(f"npu_lstm: x must be (T, B, I), got shape {tuple(x.shape)}")
    hidden = h.shape[-1]
    if tuple(weight.shape) != (x.shape[-1] + hidden, 4 * hidden):
        raise ValueError(
            f"npu_lstm: weight must be (input + hidden, 4 * hidden) = "
            f"({x.shape[-1] + hidden}, {4 * hidden}), got {tuple(weight.shape)}"
        )
    return hidden


def npu_lstm(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    seqMask: torch.Tensor | None,  # torch_npu's argument name
    h: torch.Tensor,
    c: torch.Tensor,
    has_biases: bool = True,
    num_layers: int = 1,
    dropout: float = 0.0,
    train: bool = True,
    bidirectional: bool = False,
    batch_first: bool = False,
    flag_seq: bool = False,
    direction: bool = False,
) -> tuple[torch.Tensor, ...]:
    """One LSTM layer over a whole sequence as one ``DynamicRNN`` kernel (see the module
    docstring for the arguments and the eight outputs)."""
    del dropout  # one layer: nothing between layers to drop
    if num_layers != 1 or bidirectional or direction:
        raise ValueError("npu_lstm: only one unidirectional layer is supported (num_layers=1)")
    if batch_first:
        x = x.transpose(0, 1)
    hidden = _check(x, weight, h, c)
    h0 = h.reshape(x.shape[1], hidden)
    c0 = c.reshape(x.shape[1], hidden)
    b = bias if has_biases else None
    mask = seqMask if flag_seq else None
    if mask is not None and tuple(mask.shape[:2]) != tuple(x.shape[:2]):
        raise ValueError(
            f"npu_lstm: seqMask must be (T, B) or (T, B, H) = {tuple(x.shape[:2])}..., "
            f"got {tuple(mask.shape)}"
        )
    training = bool(train) and torch.is_grad_enabled()
    outputs = _Lstm.apply(_layer(x, hidden, b is not None), training, x, weight, b, mask, h0, c0)
    if batch_first:
        outputs = tuple(o.transpose(0, 1) for o in outputs)
    return tuple(outputs)
