"""Fusable op patterns found on the recorded stream of host ops.

Attention is matched on the dataflow first (:mod:`msprof_py.analyzers.attention`); its ops
take part in no other pattern. For the others the dataflow, not recorded as tensor ids, is
approximated from the op sequence: the
host ops of each thread, in start order, that launched device work; each becomes one letter
(``rules/patterns.yaml``), and the patterns are regular expressions over the letters. A match
holds only ops whose every op after the first (copies excepted) consumes a tensor with as
many elements as one of the three ops before it produced, so ops that merely follow each
other do not count, and it never crosses a thread or a step. Ops inside an optimizer step
are left to the optimizer rule.

Everything is vectorised with numpy except the regular expression itself, which runs over one
string per rank (one character per op) and yields one match object per pattern instance.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
import pandas as pd

from msprof_py.analyzers import intervals, shapes
from msprof_py.analyzers.context import RankData
from msprof_py.analyzers.findings import read_rules_file

GLUE = "c"
OPTIMIZER = "O"
OTHER = "."
SEPARATOR = "|"
CONSUMED = "#"
LOOKBACK = 3
OPTIMIZER_ANNOTATION = re.compile(r"^Optimizer\.step")
MATCH_COLUMNS = ["rank", "match", "pattern", "step", "first_event_id", "ops", "letters", "module"]


@dataclass(frozen=True)
class Pattern:
    """One fusable pattern: its name, label and regular expression over op letters."""

    name: str
    label: str
    regex: re.Pattern[str]


@cache
def load_patterns() -> tuple[dict[str, str], tuple[Pattern, ...]]:
    """(ATen base name -> letter, patterns in matching order) from ``rules/patterns.yaml``."""
    raw: dict[str, Any] = read_rules_file("patterns.yaml")
    letters = {name: letter for letter, names in raw["tokens"].items() for name in names}
    patterns = tuple(
        Pattern(name, spec["label"], re.compile(spec["regex"]))
        for name, spec in raw["patterns"].items()
    )
    return letters, patterns


def op_stream(data: RankData) -> pd.DataFrame:
    """The rank's ops that launched device work, in stream order, with letter and dataflow.

    Columns: the host op's ``event_id``, ``name``, ``module``, ``thread``, ``step``,
    ``start_ns``, ``end_ns``, ``letter`` (its character code), ``glue``, ``linked`` (consumes
    an output of one of the previous ops), ``out_numel`` and ``group`` (one per thread).
    """
    cached = data.cache.get("op_stream")
    if cached is not None:
        return cached
    tasks = data.tasks
    mask = (tasks["host_op_id"] >= 0) & tasks["kind"].isin(("kernel", "memcpy"))
    work = tasks.loc[mask, ["host_op_id", "copy_kind", "output_shapes", "output_dtypes"]]
    last = work.drop_duplicates("host_op_id", keep="last").set_index("host_op_id")
    host_copy = work.loc[work["copy_kind"].isin(("HOST_TO_DEVICE", "DEVICE_TO_HOST")), "host_op_id"]
    cols = ["event_id", "name", "module", "thread", "step", "start_ns", "end_ns"]
    ops = data.host_ops
    ops = ops.loc[ops["event_id"].isin(last.index), [*cols, "input_shapes", "input_dtypes"]]
    numel_of, numel = shapes.numel_table(ops["input_shapes"], ops["input_dtypes"])
    keep = np.flatnonzero(numel.max(axis=1, initial=-1)[numel_of] > 1)  # not ops on scalars
    # only: counters, loss scale; then in stream order (one copy of the rows kept)
    sort_by = (ops[c].to_numpy()[keep] for c in ("event_id", "start_ns", "thread"))
    take = keep[np.lexsort(tuple(sort_by))]
    in_shapes = ops["input_shapes"].astype(str).to_numpy()[take]
    ops, in_numel = ops[cols].iloc[take].reset_index(drop=True), numel[numel_of[take]]
    letter = _letters(ops["name"])
    letter[ops["event_id"].isin(host_copy).to_numpy()] = ord(OTHER)
    annotations = data.all_host.loc[
        data.all_host["kind"] == "annotation", ["name", "start_ns", "end_ns"]
    ]
    opt = annotations[
        annotations["name"].str.match(OPTIMIZER_ANNOTATION).fillna(False).to_numpy(bool)
    ]
    in_opt = intervals.Coverage(opt["start_ns"].to_numpy(), opt["end_ns"].to_numpy()).contains(
        ops["start_ns"].to_numpy()
    )
    letter[in_opt] = ord(OPTIMIZER)
    ids = ops["event_id"].to_numpy()
    out_m = shapes.numel_matrix(
        last["output_shapes"].reindex(ids), last["output_dtypes"].reindex(ids), width=1
    )[:, 0]
    out_numel = np.where(out_m > 0, out_m, in_numel[:, 0])
    threads = ops["thread"].to_numpy()
    group = np.concatenate([[0], np.cumsum(threads[1:] != threads[:-1])]).astype(np.int64)
    group = group[: len(ops)]
    linked = np.zeros(len(ops), dtype=bool)
    for back in range(1, LOOKBACK + 1):
        prev_out = np.full(len(ops), -2, dtype=np.int64)
        prev_out[back:] = out_numel[:-back]
        same = np.zeros(len(ops), dtype=bool)
        same[back:] = group[back:] == group[:-back]
        hit = ((in_numel == prev_out[:, None]) & (in_numel > 1)).any(axis=1)
        linked |= hit & same
    linked &= ~_per_tensor_loop(ops["name"].to_numpy(), in_shapes, group)
    stream = ops.assign(
        letter=letter, glue=letter == ord(GLUE), linked=linked, out_numel=out_numel, group=group
    )
    data.cache["op_stream"] = stream
    return stream


def _per_tensor_loop(names: np.ndarray, in_shapes: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Ops that repeat the in-place op before them on inputs of the same shapes: a loop over a
    list of tensors (gradient clipping's ``g.mul_(coef)``, a foreach op on its per-tensor
    route), each on a tensor of its own, so equal sizes there say nothing about the dataflow."""
    repeat = np.zeros(len(names), dtype=bool)
    if len(names) > 1:
        inplace = np.array([n.endswith("_") and not n.endswith("__") for n in names[1:]])
        repeat[1:] = (
            inplace
            & (names[1:] == names[:-1])
            & (in_shapes[1:] == in_shapes[:-1])
            & (group[1:] == group[:-1])
        )
    return repeat


def _letters(names: pd.Series) -> np.ndarray:
    """The pattern letter (as a byte) of each op name."""
    letters_map, _ = load_patterns()
    codes, uniques = shapes.codes(names)
    table = np.array(
        [ord(letters_map.get(_base(u), OTHER)) for u in uniques] + [ord(OTHER)], dtype=np.uint8
    )
    return table[codes]


def _base(name: str) -> str:
    b = name.split("::", 1)[-1]
    return b[:-1] if b.endswith("_") and not b.endswith("__") else b


def _text(stream: pd.DataFrame) -> tuple[bytearray, np.ndarray]:
    """One character per op and the op row of each position (-1 for a separator).

    A separator goes before every op that starts a new thread group or a new step (steps
    need no annotation between them), and before every op that is not a copy and consumes
    nothing the ops before it produced: a match never spans a separator, so every op of a
    match after the first is linked, and a chain after an unlinked op is matched on its own.
    """
    n = len(stream)
    group = stream["group"].to_numpy()
    step = stream["step"].to_numpy()
    breaks = np.zeros(n, dtype=bool)
    if n:
        breaks[1:] = (group[1:] != group[:-1]) | (step[1:] != step[:-1])
        breaks[1:] |= ~stream["linked"].to_numpy()[1:] & ~stream["glue"].to_numpy()[1:]
    pos = np.arange(n) + np.cumsum(breaks)
    size = int(pos[-1]) + 1 if n else 0
    chars = np.full(size, ord(SEPARATOR), dtype=np.uint8)
    chars[pos] = stream["letter"].to_numpy()
    owner = np.full(size, -1, dtype=np.int64)
    owner[pos] = np.arange(n)
    return bytearray(chars.tobytes()), owner


def find(data: RankData) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Pattern matches of the rank: (matches, members).

    ``matches``: one row per match (see ``MATCH_COLUMNS``); ``members``: ``match`` and ``row``
    (the op's row in :func:`op_stream`), one row per op of each match.
    """
    cached = data.cache.get("pattern_matches")
    if cached is not None:
        return cached
    from msprof_py.analyzers import attention  # it reads op_stream

    stream = op_stream(data)
    text, owner = _text(stream)
    taken = np.isin(stream["event_id"].to_numpy(), attention.member_event_ids(data))
    if taken.any():  # attention is matched on the dataflow; its ops join no other pattern
        buf = np.frombuffer(text, dtype=np.uint8).copy()
        buf[np.flatnonzero(np.isin(owner, np.flatnonzero(taken)))] = ord(CONSUMED)
        text = bytearray(buf.tobytes())
    _, patterns = load_patterns()
    found: list[tuple[str, np.ndarray, np.ndarray]] = []
    for pattern in patterns:
        spans = np.array(
            [m.span() for m in pattern.regex.finditer(text.decode("ascii"))], dtype=np.int64
        ).reshape(-1, 2)
        if not len(spans):
            continue
        s, e = spans[:, 0], spans[:, 1]
        lengths = e - s
        idx = np.repeat(s, lengths) + (
            np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        )
        buf = np.frombuffer(text, dtype=np.uint8).copy()
        buf[idx] = ord(CONSUMED)
        text = bytearray(buf.tobytes())
        found.append((pattern.name, s, e))
    return _frames(data, stream, owner, found)


def _frames(
    data: RankData,
    stream: pd.DataFrame,
    owner: np.ndarray,
    found: list[tuple[str, np.ndarray, np.ndarray]],
) -> tuple[pd.DataFrame, pd.DataFrame]:
    if not found:
        empty = (pd.DataFrame(columns=MATCH_COLUMNS), pd.DataFrame(columns=["match", "row"]))
        data.cache["pattern_matches"] = empty
        return empty
    names = np.concatenate([np.full(len(s), n, dtype=object) for n, s, _ in found])
    s = np.concatenate([s for _, s, _ in found])
    e = np.concatenate([e for _, _, e in found])
    lengths = e - s
    match_ids = np.arange(len(s))
    positions = np.repeat(s, lengths) + (
        np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    )
    member_match = np.repeat(match_ids, lengths)
    rows = owner[positions]
    members = pd.DataFrame({"match": member_match, "row": rows})
    first = stream.iloc[owner[s]]
    # the op names of a match, built once per distinct sequence (a step repeats them all):
    # a polynomial hash of the name codes identifies the sequence
    name_codes, names_u = shapes.codes(stream["name"])
    code = name_codes[rows].astype(np.uint64) + np.uint64(1)
    offset = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    weight = np.power(np.uint64(1_000_003), offset.astype(np.uint64))
    starts = np.cumsum(lengths) - lengths
    key = np.add.reduceat(code * weight, starts) if len(starts) else np.zeros(0, np.uint64)
    key = key * np.uint64(31) + lengths.astype(np.uint64)
    seq_codes, seq_keys = pd.factorize(key, sort=False)
    first_of = np.empty(len(seq_keys), dtype=np.int64)
    first_of[seq_codes[::-1]] = np.arange(len(key) - 1, -1, -1)
    letters = stream["letter"].to_numpy()
    labels, signs = [], []
    for m in first_of:
        row_ids = rows[starts[m] : starts[m] + lengths[m]]
        labels.append("+".join(names_u[name_codes[r]].removeprefix("aten::") for r in row_ids))
        signs.append(letters[row_ids].tobytes().decode("ascii"))
    labels_a, signs_a = np.array(labels, dtype=object), np.array(signs, dtype=object)
    matches = pd.DataFrame(
        {
            "rank": data.rank,
            "match": match_ids,
            "pattern": names,
            "step": first["step"].to_numpy(),
            "first_event_id": first["event_id"].to_numpy(),
            "ops": labels_a[seq_codes],
            "letters": signs_a[seq_codes],
            "module": first["module"].to_numpy(),
        },
        columns=MATCH_COLUMNS,
    )
    result = (matches, members)
    data.cache["pattern_matches"] = result
    return result
