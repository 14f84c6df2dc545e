"""Attention fusions: a matmul-softmax-matmul chain as one ``FlashAttentionScore`` kernel, and
its backward as one ``FlashAttentionScoreGrad``.

* ``FlashAttentionFusionPass`` (forward): ``bmm(Q, K^T)`` -> optionally ``mul``/``div`` by a
  scalar (scaling), ``add(mask)``, casts -> a softmax (``_softmax``, ``_safe_softmax`` or the
  decomposed amax/sub/exp/sum/div chain) -> optionally ``native_dropout`` or a cast ->
  ``bmm(P, V)``. Costed by :func:`msprof_py.device.attention.flash_attention_cost` over the
  q, k, v, mask and output bytes: the score-sized values the decomposed graph saves for its
  backward (the softmax output, the dropout mask) are listed as the kernel's outputs so the
  backward still finds them, but not charged: the fused kernel keeps scores on chip.
* ``FlashAttentionGradFusionPass`` (backward): ``bmm(dO, V^T)`` -> optionally
  ``native_dropout_backward`` -> ``_softmax_backward_data`` -> optionally the scale ``mul``
  -> the two matmuls giving dQ and dK, together with the matmul giving dV (``bmm(P^T,
  dO)``). Its score-sized inputs (saved softmax output, dropout mask) are not charged either
  (FlashAttentionScoreGrad recomputes them from Q, K and the softmax statistics).

Preconditions: an Atlas A2/A3-class chip (``soc_version`` Ascend910B* or Ascend910_93, as
``torch_npu.npu_fusion_attention`` requires), float16 / bfloat16 only (FlashAttentionScore has
no float32 kernel, so an fp32 chain - also the fp32 math decomposition torch traces for an SDPA
call that is no fused-attention node - stays unfused, as eager runs it), a mask add whose mask
is shaped as FlashAttentionScore's ``atten_mask`` (``[Sq, Skv]`` or ``[B|1, N|1, Sq, Skv]``:
both sequence axes whole; a ``[B, 1, 1, Skv]`` padding mask broadcast over the queries is a
miss, as it is for SDPA), a softmax over the last axis, intermediates read only inside the
pattern (graph outputs allowed). Every miss is recorded with all the reasons that apply.
"""

from __future__ import annotations

import math

from msprof_py.device.attention import flash_attention_cost
from msprof_py.device.spec import DeviceSpec
from msprof_py.graph.ir import Node, ValueRef
from msprof_py.graph.passes.chains import match_softmax
from msprof_py.graph.passes.patterns import leaks, scalar_operand
from msprof_py.graph.passes.plan import Plan

FLASH_ATTENTION = "FlashAttentionFusionPass"
FLASH_ATTENTION_GRAD = "FlashAttentionGradFusionPass"

_DTYPES = frozenset({"float16", "bfloat16"})
_BMM = frozenset({"bmm", "matmul"})


def flash_attention_support(spec: DeviceSpec, dtype: str) -> str:
    """Why the chip cannot run ``FlashAttentionScore`` in ``dtype`` ("" when it can)."""
    if not spec.a2_class:
        return (
            "FlashAttentionScore needs an Atlas A2/A3 chip (Ascend910B, Ascend910_93); "
            f"this is {spec.soc_version}"
        )
    if dtype not in _DTYPES:
        return f"FlashAttentionScore supports float16 and bfloat16 only, not {dtype}"
    return ""


def _scores_shape(node: Node) -> tuple[int, int, int]:
    shape = node.outputs[0].shape
    sq, skv = shape[-2], shape[-1]
    return math.prod(shape) // max(sq * skv, 1), sq, skv


def _charged_bytes(plan: Plan, members: list[str], scores: int, *, backward: bool) -> int:
    """External bytes, without the score-sized outputs (forward) / inputs (backward)."""
    inputs, outputs = plan.group_io(members)
    skip = inputs if backward else outputs
    total = plan.external_bytes(members)
    dropped = sum(plan.graph.spec(r).nbytes for r in skip if plan.graph.spec(r).numel == scores)
    return max(total - dropped, 0)


def _softmax_dim_ok(node: Node) -> bool:
    if node.target not in ("_softmax", "_safe_softmax", "softmax"):
        return True
    dim = node.attrs.get("dim", -1)
    return dim in (-1, len(node.outputs[0].shape) - 1)


def _mask_shape_why(mask: tuple[int, ...], scores: tuple[int, ...]) -> str:
    """Why ``mask`` (added to ``scores``) is no FlashAttentionScore ``atten_mask``: that is
    ``[Sq, Skv]`` or ``[B|1, N|1, Sq, Skv]`` (the leading axes 1 or the scores'); "" if it is."""
    lead = scores[:-2]
    ok = (
        len(mask) >= 2
        and len(mask) in (2, len(scores))
        and tuple(mask[-2:]) == tuple(scores[-2:])
        and all(m in (1, s) for m, s in zip(mask[:-2], lead, strict=False))
    )
    if ok:
        return ""
    return (
        f"unsupported mask shape {list(mask)}: FlashAttentionScore's atten_mask is [Sq, Skv] "
        f"or [B|1, N|1, Sq, Skv] with Sq={scores[-2]}, Skv={scores[-1]}"
    )


def _walk_up(plan: Plan, node: Node | None) -> tuple[Node | None, list[Node], str]:
    """From a softmax's input up to the score matmul through scale, mask add and casts; the
    third item says why a mask add's mask is no ``atten_mask`` ("" when none is wrong)."""
    passed: list[Node] = []
    mask_why = ""
    for _ in range(8):
        if node is None or not plan.free(node):
            return None, passed, mask_why
        if node.target in _BMM:
            return node, passed, mask_why
        if (node.target in ("mul", "div") and scalar_operand(node)) or node.target == "_to_copy":
            passed.append(node)
            node = plan.arg(node, 0)
            continue
        if node.target in ("add", "mul", "div") and len(node.inputs) == 2:
            ins = [plan.arg(node, i) for i in (0, 1)]
            follow = [
                p for p in ins if p is not None and p.is_op and p.target in (*_BMM, "mul", "div")
            ]
            if not follow:
                return None, passed, mask_why
            if node.target == "add" and len(follow) == 1:
                other = node.inputs[1 - ins.index(follow[0])]
                scores = node.outputs[0].shape
                mask_why = mask_why or _mask_shape_why(plan.graph.spec(other).shape, scores)
            passed.append(node)
            node = follow[0]
            continue
        return None, passed, mask_why
    return None, passed, mask_why


def flash_attention(plan: Plan) -> None:
    """FlashAttentionFusionPass (module docstring)."""
    for node in plan.live_ops():
        chain = match_softmax(plan, node)
        if chain is None:
            continue
        sink = plan.graph.node(chain.sink)
        bmm1, passed, mask_why = _walk_up(plan, plan.producer(chain.x))
        if bmm1 is None:
            continue
        cur, down = sink, []
        readers = plan.ref_users(cur.out(0))
        while len(readers) == 1 and readers[0].target in ("native_dropout", "_to_copy"):
            cur = readers[0]
            down.append(cur)
            readers = plan.ref_users(cur.out(0))
        bmm2 = readers[0] if len(readers) == 1 else None
        if bmm2 is None or bmm2.target not in _BMM or not plan.free(bmm2):
            continue
        if plan.resolve(bmm2.inputs[0]) != cur.out(0):
            continue
        members = [bmm1.name, *(n.name for n in passed), *chain.members, *(n.name for n in down)]
        members.append(bmm2.name)
        dtype = bmm1.outputs[0].dtype
        why = flash_attention_support(plan.spec, dtype)
        if not why.startswith("FlashAttentionScore needs"):  # on a chip that has the kernel
            extra = [
                mask_why,
                "" if _softmax_dim_ok(sink) else "the softmax is not over the last axis",
            ]
            why = "; ".join(w for w in (why, *extra) if w)
        why = why or leaks(plan, members, (bmm2.name,)) or plan.blocker(members)
        if why:
            plan.miss(FLASH_ATTENTION, members, why)
            continue
        batch, sq, skv = _scores_shape(sink)
        d = plan.graph.spec(bmm1.inputs[0]).shape[-1]
        dv = bmm2.outputs[0].shape[-1]
        cost = flash_attention_cost(
            plan.spec,
            batch=batch,
            sq=sq,
            skv=skv,
            d=d,
            dv=dv,
            dtype=dtype,
            nbytes=_charged_bytes(plan, members, batch * sq * skv, backward=False),
        )
        plan.commit(FLASH_ATTENTION, "FlashAttentionScore", members, name=sink.name, cost=cost)


def _grad_head_dim(plan: Plan, grads: list[Node], ds: ValueRef) -> int | None:
    for g in grads:
        refs = [plan.resolve(r) for r in g.inputs]
        if refs and refs[0] == ds:
            return g.outputs[0].shape[-1]
        if len(refs) > 1 and refs[1] == ds:
            return g.outputs[0].shape[-2]
    return None


def flash_attention_grad(plan: Plan) -> None:
    """FlashAttentionGradFusionPass (module docstring)."""
    for sb in plan.live_ops():
        if sb.target != "_softmax_backward_data" or not plan.free(sb):
            continue
        up: list[Node] = []
        g = plan.arg(sb, 0)
        while (
            g is not None and plan.free(g) and g.target in ("native_dropout_backward", "_to_copy")
        ):
            up.append(g)
            g = plan.arg(g, 0)
        if g is None or g.target not in _BMM or not plan.free(g):
            continue
        dp = g
        cur = sb
        scale = plan.only_user(sb)
        if scale is not None and scale.target in ("mul", "div") and scalar_operand(scale):
            cur = scale
        grads = [u for u in plan.users(cur) if u.target in _BMM and plan.free(u)]
        if len(grads) != 2 or len(plan.users(cur)) != 2:
            continue
        members = [dp.name, *(n.name for n in up), sb.name]
        if cur is not sb:
            members.append(cur.name)
        members += [gr.name for gr in grads]
        d_o = plan.resolve(dp.inputs[0])
        dvs = [
            u
            for u in plan.ref_users(d_o)
            if u.target in _BMM
            and u.name != dp.name
            and plan.free(u)
            and plan.resolve(u.inputs[-1]) == d_o
        ]
        dtype = dp.outputs[0].dtype
        why = flash_attention_support(plan.spec, dtype)
        if not why and not dvs:
            why = "no dV matmul reads the output gradient"
        if not why:
            members.append(dvs[0].name)
        d = _grad_head_dim(plan, grads, cur.out(0))
        if not why and d is None:
            why = "the dQ/dK matmuls do not read the softmax gradient directly"
        why = why or leaks(plan, members, [gr.name for gr in grads] + [m for m in members[-1:]])
        why = why or plan.blocker(members)
        if why:
            plan.miss(FLASH_ATTENTION_GRAD, members, why)
            continue
        assert d is not None
        batch, sq, skv = _scores_shape(sb)
        cost = flash_attention_cost(
            plan.spec,
            batch=batch,
            sq=sq,
            skv=skv,
            d=d,
            dv=plan.graph.spec(dp.inputs[0]).shape[-1],
            dtype=dtype,
            nbytes=_charged_bytes(plan, members, batch * sq * skv, backward=True),
            backward=True,
        )
        plan.commit(
            FLASH_ATTENTION_GRAD, "FlashAttentionScoreGrad", members, name=sb.name, cost=cost
        )
