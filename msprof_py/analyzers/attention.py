"""Attention written as separate kernels, found on the dataflow of the recorded host ops.

The profile records no tensor identities, so the dataflow is followed through shapes, which
attention constrains tightly. On each thread's op stream (:func:`patterns.op_stream`, in
order), an **attention** is a softmax between two batched matmuls with no other cube op
between them, where

* the first matmul (``bmm``/``baddbmm``/``matmul``: ``Q K^T``) writes a ``[..., L, S]`` score
  tensor and the softmax (``_softmax``, ``softmax``, ``_safe_softmax``) reads a tensor of as
  many elements whose last dim is ``S``;
* the second matmul (``P V``) reads a tensor of that many elements whose last dim is ``S``
  and writes ``[..., L, Dv]`` with the same batch (``batch x heads``);
* both matmuls run in the same module (the module path the recorder keeps).

Whatever sits between (scaling, masks built with ``==``/``masked_fill``/``where``/``tril``,
adding a mask, dropout, ``_safe_softmax``'s ``isneginf``/``all``/``where``, copies) is
allowed: the ops among them that write a score-sized tensor belong to the attention, the
others (building a mask of another shape) are kept. Copies right before the first matmul of
the q/k size and right after the second of the output size (``transpose(...).contiguous()``
for the head layout) belong to it too: ``npu_fusion_attention`` takes the BSH/BSND layout
as it is. ``scaled_dot_product_attention`` host ops that ran the math path (no
``FlashAttentionScore`` task) are attentions as well.

The backward of each attention is found by the autograd sequence numbers the recorder
keeps: the recorder reads the number a forward op's grad_fn was given after it was created
(the next one), so the backward ops of a forward op recorded with number ``s`` run in node
``s - 1``; they are the ops recorded with that number after the forward in the same step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from msprof_py.analyzers import shapes
from msprof_py.analyzers.context import RankData
from msprof_py.analyzers.patterns import OPTIMIZER, _base, op_stream

BATCHED_MATMULS = frozenset({"bmm", "baddbmm", "matmul"})
SOFTMAXES = frozenset({"_softmax", "softmax", "_safe_softmax"})
CUBE_LETTERS = (ord("M"), ord("C"))
GLUE = ord("c")
DROPOUT = frozenset({"native_dropout", "dropout"})
SDPA = "aten::scaled_dot_product_attention"
SDPA_BACKWARD = "aten::scaled_dot_product_attention_backward"
FLASH = "FlashAttentionScore"
#: at most this many ops between the first matmul and the softmax, and between it and the
#: second matmul (masks and _safe_softmax add a handful; more is not one attention)
MAX_BETWEEN = 24
#: layout copies looked for right before the first matmul (q and k) and after the second
LAYOUT_BEFORE = 3
COLUMNS = [
    "match",
    "form",
    "step",
    "thread",
    "module",
    "first_event_id",
    "ops",
    "batch",
    "sq",
    "skv",
    "d",
    "dv",
    "dtype",
    "masked",
    "dropout",
]


@dataclass(frozen=True)
class Attention:
    """Every attention of a rank: one row per instance (:data:`COLUMNS`), and its member ops
    (``match``, ``event_id``, ``phase``: ``forward`` | ``backward``)."""

    matches: pd.DataFrame
    members: pd.DataFrame


def find(data: RankData) -> Attention:
    """The rank's attentions (cached)."""
    cached = data.cache.get("attention")
    if cached is None:
        cached = data.cache["attention"] = _find(data)
    return cached


def member_event_ids(data: RankData) -> np.ndarray:
    """Event ids of the ops (forward and backward) that belong to an attention: other
    patterns skip them."""
    return find(data).members["event_id"].to_numpy(dtype=np.int64)


def _dims(text: str) -> list[tuple[int, ...]]:
    """``"8,4,64,64;64,64"`` -> ``[(8, 4, 64, 64), (64, 64)]``."""
    return shapes.parse(text)


def _find(data: RankData) -> Attention:
    stream = op_stream(data)
    rows: list[dict] = []
    members: list[tuple[int, int, str]] = []
    if len(stream):
        _explicit(data, stream, rows, members)
    _sdpa_math(data, rows, members)
    matches = pd.DataFrame(rows, columns=COLUMNS)
    matches["match"] = np.arange(len(matches))
    mem = pd.DataFrame(members, columns=["match", "event_id", "phase"])
    if len(matches):
        mem = _backward(data, matches, _with_views(data, matches, mem))
    return Attention(matches, mem)


def _explicit(
    data: RankData, stream: pd.DataFrame, rows: list[dict], members: list[tuple[int, int, str]]
) -> None:
    """Attentions written as matmul, softmax, matmul (see the module docstring)."""
    names = stream["name"].astype(str).to_numpy()
    name_codes, uniques = shapes.codes(stream["name"])
    bases = np.array([_base(u) for u in uniques] + [""], dtype=object)[name_codes]
    soft = np.flatnonzero(np.isin(bases, list(SOFTMAXES)))
    if not len(soft):
        return
    letter = stream["letter"].to_numpy()
    group = stream["group"].to_numpy()
    cube = np.isin(letter, CUBE_LETTERS)
    n = len(stream)
    idx = np.arange(n)
    prev_cube = np.maximum.accumulate(np.where(cube, idx, -1))
    next_cube = np.minimum.accumulate(np.where(cube, idx, n)[::-1])[::-1]
    # the cube op before / after each softmax (strictly)
    before = np.where(soft > 0, prev_cube[np.maximum(soft - 1, 0)], -1)
    before[soft == 0] = -1
    after = np.where(soft < n - 1, next_cube[np.minimum(soft + 1, n - 1)], n)
    ok = (before >= 0) & (after < n)
    ok &= (soft - before <= MAX_BETWEEN + 1) & (after - soft <= MAX_BETWEEN + 1)
    soft, before, after = soft[ok], before[ok], after[ok]
    ok = (group[before] == group[soft]) & (group[after] == group[soft])
    ok &= np.isin(bases[before], list(BATCHED_MATMULS)) & np.isin(
        bases[after], list(BATCHED_MATMULS)
    )
    modules = stream["module"].astype(str).to_numpy()
    ok &= modules[before] == modules[after]
    ok &= letter[soft] != ord(OPTIMIZER)
    soft, before, after = soft[ok], before[ok], after[ok]
    if not len(soft):
        return
    ids = stream["event_id"].to_numpy()
    host = data.host_ops.set_index("event_id")
    in_shapes = host["input_shapes"].astype(str).reindex(ids).fillna("").to_numpy()
    in_dtypes = host["input_dtypes"].astype(str).reindex(ids).fillna("").to_numpy()
    out_shapes = _output_shapes(data, ids)
    out_numel = stream["out_numel"].to_numpy()
    used: set[int] = set()
    for j, i, k in zip(soft.tolist(), before.tolist(), after.tolist(), strict=True):
        if i in used or k in used:
            continue
        found = _match(in_shapes, out_shapes, i, j, k)
        if found is None:
            continue
        batch, sq, skv, d, dv = found
        score = batch * sq * skv
        span = np.arange(i, k + 1)
        inside = span[(out_numel[span] == score) | (letter[span] == GLUE)]
        fwd = set(inside.tolist()) | {i, j, k}
        q_numel, k_numel, o_numel = batch * sq * d, batch * skv * d, batch * sq * dv
        for b in range(i - 1, max(i - 1 - LAYOUT_BEFORE, -1), -1):
            glue = letter[b] == GLUE and group[b] == group[i] and modules[b] == modules[i]
            if not (glue and out_numel[b] in (q_numel, k_numel, batch * skv * dv)):
                break
            fwd.add(b)
        a = k + 1
        if a < n and letter[a] == GLUE and group[a] == group[k] and out_numel[a] == o_numel:
            fwd.add(a)
        between = set(range(i, k + 1)) - fwd
        used.update((i, k))
        order = sorted(fwd)
        match = len(rows)
        inner = bases[order]
        rows.append(
            {
                "form": "explicit",
                "step": int(stream["step"].iat[i]),
                "thread": int(stream["thread"].iat[i]),
                "module": modules[i],
                "first_event_id": int(ids[order[0]]),
                "ops": "+".join(names[r].removeprefix("aten::") for r in order if r >= i),
                "batch": batch,
                "sq": sq,
                "skv": skv,
                "d": d,
                "dv": dv,
                "dtype": (in_dtypes[i].split(";") or ["float32"])[0] or "float32",
                "masked": _masked(bases, in_shapes, order, between),
                "dropout": bool(np.isin(inner, list(DROPOUT)).any()),
            }
        )
        members.extend((match, int(ids[r]), "forward") for r in order)


def _masked(bases: np.ndarray, in_shapes: np.ndarray, order: list[int], between: set[int]) -> bool:
    """True when a mask enters the scores: an op of the chain with a second tensor input
    (masked_fill, where, add of a mask) or mask ops beside it."""
    for r in order:
        if bases[r] in ("masked_fill", "where", "add") and len(_dims(in_shapes[r])) >= 2:
            return True
    return bool(between)


def _output_shapes(data: RankData, ids: np.ndarray) -> np.ndarray:
    """The output shapes text of each op's last task."""
    tasks = data.tasks
    t = tasks.loc[tasks["host_op_id"].isin(ids), ["host_op_id", "output_shapes"]]
    last = t.drop_duplicates("host_op_id", keep="last").set_index("host_op_id")
    return last["output_shapes"].astype(str).reindex(ids).fillna("").to_numpy()


def _match(
    in_shapes: np.ndarray, out_shapes: np.ndarray, i: int, j: int, k: int
) -> tuple[int, int, int, int, int] | None:
    """(batch, L, S, D, Dv) when matmul ``i``, softmax ``j`` and matmul ``k`` chain as
    ``softmax(Q K^T) V``; None otherwise."""
    out1 = _dims(out_shapes[i])
    if not out1 or len(out1[0]) < 3:
        return None
    scores = out1[0]
    sq, skv = scores[-2], scores[-1]
    batch = math.prod(scores[:-2])
    numel = batch * sq * skv
    soft_in = _dims(in_shapes[j])
    if not soft_in or math.prod(soft_in[0]) != numel or soft_in[0][-1:] != (skv,):
        return None
    probs = [s for s in _dims(in_shapes[k]) if s and math.prod(s) == numel and s[-1] == skv]
    out2 = _dims(out_shapes[k])
    if not probs or not out2 or len(out2[0]) < 2:
        return None
    dv = out2[0][-1]
    if out2[0][-2] != sq or math.prod(out2[0]) != batch * sq * dv:
        return None
    operands = _dims(in_shapes[i])[-2:]  # (q, k^T); baddbmm's scores input comes first
    if len(operands) < 2 or min(len(x) for x in operands) < 2:
        return None
    q, kt = operands
    if q[-2] != sq or kt[-1] != skv or kt[-2] != q[-1]:
        return None
    return batch, sq, skv, q[-1], dv


def _sdpa_math(data: RankData, rows: list[dict], members: list[tuple[int, int, str]]) -> None:
    """``scaled_dot_product_attention`` host ops that ran the math path."""
    ops = data.host_ops
    sdpa = ops[ops["name"].astype(str) == SDPA]
    if sdpa.empty:
        return
    tasks = data.tasks
    t = tasks.loc[tasks["host_op_id"].isin(sdpa["event_id"]), ["host_op_id", "op_type"]]
    flash = set(t.loc[t["op_type"].astype(str) == FLASH, "host_op_id"].tolist())
    types = t.groupby("host_op_id")["op_type"].agg(lambda s: set(s.astype(str)))
    for r in sdpa.itertuples():
        if r.event_id in flash or r.event_id not in types.index:
            continue
        dims = _dims(str(r.input_shapes))
        if len(dims) < 3 or min(len(x) for x in dims[:3]) < 2:
            continue
        q, k, v = dims[:3]
        kinds = types[r.event_id]
        match = len(rows)
        rows.append(
            {
                "form": "sdpa math",
                "step": int(r.step),
                "thread": int(r.thread),
                "module": str(r.module),
                "first_event_id": int(r.event_id),
                "ops": "scaled_dot_product_attention (math path)",
                "batch": math.prod(q[:-2]),
                "sq": q[-2],
                "skv": k[-2],
                "d": q[-1],
                "dv": v[-1],
                "dtype": (str(r.input_dtypes).split(";") or ["float32"])[0] or "float32",
                "masked": "Add" in kinds or len(dims) > 3,
                "dropout": "DropOutDoMask" in kinds,
            }
        )
        members.append((match, int(r.event_id), "forward"))


def _with_views(data: RankData, matches: pd.DataFrame, members: pd.DataFrame) -> pd.DataFrame:
    """``members`` with the forward host ops that launch no device work (views, transposes,
    reshapes) inside each explicit attention's span on its thread, and those right before it
    in its module on tensors of the size of q, k or v (the views that split the heads; not
    the split of a fused qkv projection, which stays): a fused call dispatches none of them."""
    explicit = matches.loc[matches["form"] == "explicit"]
    if explicit.empty:
        return members
    ops = data.host_ops
    ops = ops[ops["thread"].isin(explicit["thread"])].sort_values(["thread", "start_ns"])
    ids = ops["event_id"].to_numpy()
    tasks = data.tasks
    device = np.isin(ids, tasks.loc[tasks["host_op_id"] >= 0, "host_op_id"].to_numpy())
    position = pd.Series(np.arange(len(ids)), index=ids)
    thread = ops["thread"].to_numpy()
    modules = ops["module"].astype(str).to_numpy()
    first_numel = shapes.numel_matrix(ops["input_shapes"], ops["input_dtypes"], width=1)[:, 0]
    fwd = members[members["match"].isin(explicit["match"])]
    pos = fwd.assign(pos=position.reindex(fwd["event_id"]).to_numpy())
    span = pos.groupby("match")["pos"].agg(["min", "max"])
    found = [members]
    for r in explicit.itertuples():
        lo, hi = int(span.at[r.match, "min"]), int(span.at[r.match, "max"])
        inside = np.arange(lo, hi + 1)
        extra = inside[~device[inside]].tolist()
        sizes = (r.batch * r.sq * r.d, r.batch * r.skv * r.d, r.batch * r.skv * r.dv)
        b = lo - 1
        while b >= 0 and not device[b] and thread[b] == thread[lo] and modules[b] == r.module:
            if first_numel[b] not in sizes:
                break
            extra.append(b)
            b -= 1
        found.append(pd.DataFrame({"match": r.match, "event_id": ids[extra], "phase": "forward"}))
    return pd.concat(found, ignore_index=True)


def _unrecorded_nodes(ops: pd.DataFrame, seq: pd.DataFrame, end: pd.Series) -> pd.DataFrame:
    """The autograd nodes (``match``, ``node``, ``step``) of forward ops inside each attention
    that left no host op: a view such as the output's ``transpose(1, 2)`` gets a sequence
    number but dispatches nothing the recorder sees, and its backward (the gradient's layout
    copy before the first backward matmul) runs in its node. Numbers between an attention's
    first and last member that no recorded forward op holds are taken as such views; a
    recorded op in that range that is not a member (a learned bias added to the scores) keeps
    its backward."""
    rows = []
    numbered = ops.loc[ops["sequence"] >= 0, ["sequence", "step", "start_ns"]]
    by_step = dict(tuple(numbered.groupby("step")))
    for (match, step), group in seq.groupby(["match", "step"]):
        lo, hi = int(group["sequence"].min()), int(group["sequence"].max())
        taken = set(group["sequence"].astype(int))
        fwd_ops = by_step.get(step, numbered.iloc[:0])
        near = fwd_ops[fwd_ops["sequence"].between(lo, hi) & (fwd_ops["start_ns"] <= end.at[match])]
        recorded = set(near["sequence"].astype(int))
        for number in range(lo, hi + 1):
            if number not in taken and number not in recorded:
                rows.append((match, number - 1, step))
    return pd.DataFrame(rows, columns=["match", "node", "step"])


def _backward(data: RankData, matches: pd.DataFrame, members: pd.DataFrame) -> pd.DataFrame:
    """``members`` with the backward ops of each attention added."""
    ops = data.host_ops
    fwd = members.merge(
        ops[["event_id", "sequence", "step", "start_ns", "end_ns"]], on="event_id", how="left"
    )
    found = [members]
    # explicit chains: the ops run in node (recorded number - 1), after the forward
    seq = fwd[fwd["sequence"] >= 0]
    if len(seq):
        end = seq.groupby("match")["end_ns"].max()
        nodes = _unrecorded_nodes(ops, seq, end)
        nodes = pd.concat([seq.assign(node=seq["sequence"] - 1)[["match", "node", "step"]], nodes])
        nodes = nodes.drop_duplicates(["node", "step"])
        cand = ops[ops["sequence"] >= 0][["event_id", "sequence", "step", "start_ns"]]
        cand = cand[~cand["event_id"].isin(members["event_id"])]
        hit = cand.merge(nodes, left_on=["sequence", "step"], right_on=["node", "step"])
        hit = hit[hit["start_ns"].to_numpy() >= end.reindex(hit["match"]).to_numpy()]
        found.append(hit.assign(phase="backward")[["match", "event_id", "phase"]])
    # SDPA's math path: its backward op, paired in reverse order within the step
    sdpa = matches[matches["form"] == "sdpa math"]
    if len(sdpa):
        back = ops[ops["name"].astype(str) == SDPA_BACKWARD]
        back_by_step = back.groupby("step")["event_id"]
        pairs: list[tuple[int, int]] = []
        for step, fwd_rows in sdpa.groupby("step"):
            if step in back_by_step.groups:
                b = back_by_step.get_group(step).to_numpy()[::-1]
                pairs.extend(zip(fwd_rows["match"].tolist(), b.tolist(), strict=False))
        if pairs:
            m, e = zip(*pairs, strict=True)
            found.append(pd.DataFrame({"match": m, "event_id": e, "phase": "backward"}))
    out = pd.concat(found, ignore_index=True)
    return out.astype({"match": "int64", "event_id": "int64"})
