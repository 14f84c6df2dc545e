"""The cost of the fused FlashAttention kernels (``FlashAttentionScore`` and its grad).

One MIX_AIC launch: the cube runs the attention's matmuls for every (batch, head) pair
(forward: ``S = Q K^T`` and ``O = P V``; backward: the recomputed ``S``, ``dV = P^T dO``,
``dP = dO V^T``, ``dQ = dS K`` and ``dK = dS^T Q``), the vector units the online softmax over
the score elements (fp32), and HBM sees only the bytes the caller passes: q, k, v, the output,
the softmax statistics and the masks read, never the score matrix. ``density`` is the share
of the scores computed (causal and band masks skip whole blocks).

Shared by the ``torch_npu.npu_fusion_attention`` shim (which launches the kernel) and the
analysis (which re-costs an attention written as separate kernels), so an estimate and the
kernel the recommended change launches are the same number. Torch-free.
"""

from __future__ import annotations

import dataclasses
import math

from msprof_py.device.costmodel import KernelCost, bound_of, matmul_cost, vector_cost
from msprof_py.device.records import TaskType
from msprof_py.device.spec import DeviceSpec

#: vector instructions per score element of the online softmax (scale, pse, mask, row max,
#: subtract, exp ~4, row sum, rescale, cast) and of its backward (recompute + dS = P * (dP - D))
SOFTMAX_OPS = 10.0
SOFTMAX_GRAD_OPS = 14.0
#: last dim of the fp32 softmax_max / softmax_sum outputs (torch_npu's SOFTMAXMAX_LAST_DIMSHAPE)
STAT_WIDTH = 8

#: the (m, n, k) of each matmul, in the axes "q" (Sq), "kv" (Skv), "d", "dv"
_FORWARD = (("q", "kv", "d"), ("q", "dv", "kv"))
_BACKWARD = (
    ("q", "kv", "d"),
    ("kv", "dv", "q"),
    ("q", "kv", "dv"),
    ("q", "d", "kv"),
    ("kv", "d", "q"),
)


def flash_attention_cost(
    spec: DeviceSpec,
    *,
    batch: int,
    sq: int,
    skv: int,
    d: int,
    dv: int,
    dtype: str,
    nbytes: int,
    density: float = 1.0,
    backward: bool = False,
) -> KernelCost:
    """``FlashAttentionScore`` (``backward``: ``FlashAttentionScoreGrad``) over ``batch``
    (batch x heads) pairs of ``sq`` queries and ``skv`` keys of head dims ``d`` / ``dv`` in
    ``dtype``, moving ``nbytes`` of HBM traffic, computing ``density`` of the scores."""
    dims = {"q": sq, "kv": skv, "d": d, "dv": dv}
    first, *rest = _BACKWARD if backward else _FORWARD
    base = matmul_cost(
        spec, *(dims[x] for x in first), batch=batch, dtype=dtype, bytes_moved=nbytes
    )
    cube, flops = base.cube_ns, base.flops
    for shape in rest:
        extra = matmul_cost(
            spec,
            *(dims[x] for x in shape),
            batch=batch,
            dtype=dtype,
            block_dim=base.block_dim,
            bytes_moved=0,
        )
        cube += extra.cube_ns
        flops += extra.flops
    scores = math.ceil(batch * sq * skv * density)
    vec_blocks = min(spec.vector.cores, 2 * base.block_dim)  # a MIX group: 1 AIC + 2 AIV
    softmax = vector_cost(
        spec,
        elements=scores,
        dtype="float32",
        bytes_moved=0,
        ops_per_element=SOFTMAX_GRAD_OPS if backward else SOFTMAX_OPS,
        block_dim=vec_blocks,
    )
    cube *= density
    vector = softmax.vector_ns
    sched = base.sched_ns
    return dataclasses.replace(
        base,
        task_type=TaskType.MIX_AIC,
        cube_ns=cube,
        vector_ns=vector,
        duration_ns=sched + round(max(cube, vector, base.memory_ns)),
        bound=bound_of(sched, cube, vector, base.memory_ns),
        flops=flops * density,
    )


def drop_mask_cost(spec: DeviceSpec, keep_prob: float, numels: int) -> KernelCost | None:
    """The ``DropOutGenMaskV3`` kernel generating the bit mask of ``numels`` scores (None
    without dropout); the mask's bytes are ``cost.bytes``."""
    if not 0.0 < keep_prob < 1.0:
        return None
    nbytes = -(-numels // 128) * 128 // 8 + 32
    return vector_cost(
        spec, elements=numels, dtype="uint8", bytes_moved=nbytes, ops_per_element=1 / 8
    )
