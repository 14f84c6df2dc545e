"""``F.scaled_dot_product_attention`` on the npu: the CPU's kernel, the device's cost.

The values come from :mod:`msprof_py.adapter.host_ops`: the whole op runs on the host views,
so the CPU's own backend choice applies (its flash kernel
``_scaled_dot_product_flash_attention_for_cpu`` where it takes it, the math path elsewhere)
and outputs and gradients are bitwise the CPU's, causal or not, with ``attn_mask``, ``scale``
and ``enable_gqa``.

The device runs it as torch_npu does:

* fp16/bf16 on an A2/A3-class SoC (``soc_version`` Ascend910B*, Ascend910_93): ONE fused
  ``FlashAttentionScore`` kernel (``FlashAttentionScoreGrad`` in the backward), costed as
  ``torch_npu.npu_fusion_attention`` is (causal = top-left causal mask, whose skipped blocks
  cost nothing), after a ``DropOutGenMaskV3`` when ``dropout_p > 0``;
* otherwise (fp32, or 910A / 310P): the math path, each step the kernel its ATen op launches:
  ``Muls`` of q and k by sqrt(scale), ``BatchMatMul`` (q k^T), ``Add`` of the mask (with a mask
  or ``is_causal``), ``SoftmaxV2``, ``DropOutDoMask`` (with dropout) and ``BatchMatMul``
  (P v); the backward: ``BatchMatMul`` (dV, dP), ``SoftmaxGrad``, ``BatchMatMul`` (dQ, dK)
  and the two ``Muls``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from msprof_py.adapter.host_ops import Call, HostOp, Plan, Shape, Task, shape
from msprof_py.adapter.opcost import TensorInfo, dtype_name, op_tasks
from msprof_py.device.spec import DeviceSpec

_HALF = (torch.float16, torch.bfloat16)
#: last dim of FlashAttentionScore's softmax_max / softmax_sum outputs (fp32)
_STAT_WIDTH = 8


def uses_flash_kernel(spec: DeviceSpec, dtype: torch.dtype) -> bool:
    """True where the device runs SDPA as one fused FlashAttentionScore kernel."""
    return spec.a2_class and dtype in _HALF


def _nbytes(t: torch.Tensor | None) -> int:
    return 0 if t is None else t.numel() * t.element_size()


def _flash(spec: DeviceSpec, call: Call, dims: tuple[int, ...]) -> Plan:
    from msprof_py.adapter.torch_npu.fused import bnsd_attention, drop_mask_cost

    a = call.args
    q, k, v, mask = a["query"], a["key"], a["value"], a["attn_mask"]
    out = call.outputs[0]
    batch, heads, kv_heads, sq, skv, d, dv = dims
    scale = a["scale"] if a["scale"] is not None else 1.0 / math.sqrt(d)
    keep = 1.0 - float(a["dropout_p"])
    attention = bnsd_attention(
        batch, heads, kv_heads, sq, skv, d, dv, scale, keep, bool(a["is_causal"]), mask is not None
    )
    stats = 2 * batch * heads * sq * _STAT_WIDTH * 4
    numels = batch * heads * sq * skv
    drop = drop_mask_cost(keep, numels)
    drop_bytes = 0 if drop is None else drop.bytes
    reads = sum(_nbytes(t) for t in (q, k, v, mask))
    dtype = dtype_name(q.dtype)
    ins = tuple(shape(t) for t in (q, k, v, mask) if t is not None)
    forward_cost = attention.cost(dtype, reads + _nbytes(out) + stats + drop_bytes, backward=False)
    # backward reads q, k, v, mask, dout, out and the statistics; writes dq, dk, dv
    back_bytes = reads + 2 * _nbytes(out) + stats + drop_bytes + _nbytes(q) + _nbytes(k)
    back_bytes += _nbytes(v)
    backward_cost = attention.cost(dtype, back_bytes, backward=True)
    grads = tuple(shape(t) for t in (q, k, v))
    forward = [Task("FlashAttentionScore", forward_cost, ins, (shape(out),))]
    backward = [Task("FlashAttentionScoreGrad", backward_cost, (*ins, shape(out)), grads)]
    if drop is not None:  # the mask is generated again for the backward
        forward.insert(0, Task("DropOutGenMaskV3", drop, (shape(q),), ()))
        backward.insert(0, Task("DropOutGenMaskV3", drop, (shape(q),), ()))
    return Plan(tuple(forward), tuple(backward), stats)  # the softmax statistics


def _tasks(spec: DeviceSpec, base: str, ins: Sequence[Shape], outs: Sequence[Shape]) -> list[Task]:
    planned = op_tasks(
        spec, base, [TensorInfo(s, d) for s, d in ins], [TensorInfo(s, d) for s, d in outs]
    )
    return [Task(p.op_type, p.cost, tuple(ins), tuple(outs)) for p in planned]


def _math(spec: DeviceSpec, call: Call, dims: tuple[int, ...]) -> Plan:
    a = call.args
    batch, heads, _, sq, skv, d, dv = dims
    dt = call.outputs[0].dtype
    b = batch * heads
    qs: Shape = ((b, sq, d), dt)
    kt: Shape = ((b, d, skv), dt)
    ks: Shape = ((b, skv, d), dt)
    vs: Shape = ((b, skv, dv), dt)
    scores: Shape = ((b, sq, skv), dt)
    out: Shape = ((b, sq, dv), dt)
    masked = a["attn_mask"] is not None or bool(a["is_causal"])
    dropout = float(a["dropout_p"]) > 0.0
    forward = [
        *_tasks(spec, "mul", [qs], [qs]),
        *_tasks(spec, "mul", [ks], [ks]),
        *_tasks(spec, "bmm", [qs, kt], [scores]),
        *(_tasks(spec, "add", [scores, scores], [scores]) if masked else []),
        *_tasks(spec, "_softmax", [scores], [scores]),
        *(_tasks(spec, "native_dropout", [scores], [scores]) if dropout else []),
        *_tasks(spec, "bmm", [scores, vs], [out]),
    ]
    backward = [
        *_tasks(spec, "bmm", [((b, skv, sq), dt), out], [vs]),  # dV = P^T dO
        *_tasks(spec, "bmm", [out, ((b, dv, skv), dt)], [scores]),  # dP = dO V^T
        *(_tasks(spec, "native_dropout_backward", [scores], [scores]) if dropout else []),
        *_tasks(spec, "_softmax_backward_data", [scores, scores], [scores]),
        *_tasks(spec, "bmm", [scores, ks], [qs]),  # dQ = dS K
        *_tasks(spec, "bmm", [((b, skv, sq), dt), qs], [ks]),  # dK = dS^T Q
        *_tasks(spec, "mul", [qs], [qs]),
        *_tasks(spec, "mul", [ks], [ks]),
    ]
    return Plan(tuple(forward), tuple(backward), b * sq * skv * dt.itemsize)  # softmax(QK^T)


def _dims(call: Call) -> tuple[int, ...]:
    """(batch, heads, kv heads, Sq, Skv, D, Dv) of an SDPA call ([..., N, S, D] inputs)."""
    q, k, v = call.args["query"], call.args["key"], call.args["value"]
    heads = q.shape[-3] if q.dim() >= 3 else 1
    kv_heads = k.shape[-3] if k.dim() >= 3 else 1
    batch = math.prod(q.shape[:-3])
    return batch, heads, kv_heads, q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]


def plan_sdpa(spec: DeviceSpec, call: Call) -> Plan:
    """The kernels of one ``scaled_dot_product_attention`` call."""
    dims = _dims(call)
    if uses_flash_kernel(spec, call.args["query"].dtype):
        return _flash(spec, call, dims)
    return _math(spec, call, dims)


def host_ops() -> list[HostOp]:
    """SDPA as a host op."""
    return [HostOp("scaled_dot_product_attention", plan_sdpa)]
