"""Shape and dtype strings of the profile (``"8,3,32,32;16,3,3,3"``) as numbers, vectorised.

A training loop repeats the same few shapes, so every column is factorised first and only its
distinct strings are parsed (a Python loop over a few hundred strings, not over the rows).
Columns may be plain strings or categoricals (:func:`msprof_py.analyzers.context.prepare`
turns the profile's strings into categoricals).
A tensor with an empty shape string is 0-d (one element); how many tensors a row holds comes
from its dtype string, which has one entry per tensor.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pandas as pd

from msprof_py.device.dtypes import ITEMSIZE, canonical

#: how many tensors per row :func:`numel_matrix` keeps (the rest are rare: norms, optimizers)
WIDTH = 8


def parse(shapes: str, dtypes: str = "") -> list[tuple[int, ...]]:
    """``"8,10;;4"`` -> ``[(8, 10), (), (4,)]``; ``dtypes`` says how many tensors there are."""
    count = len(dtypes.split(";")) if dtypes else None
    if not shapes and not count:
        return []
    parts = shapes.split(";")
    if count is not None and len(parts) < count:
        parts += [""] * (count - len(parts))
    out = []
    for part in parts:
        dims = tuple(int(d) for d in part.split(",") if d.strip().lstrip("-").isdigit())
        out.append(dims)
    return out


def tensor_bytes(shapes: str, dtypes: str) -> int:
    """Bytes of the tensors a row describes (``"10,10;3"`` with ``"float16;int64"`` -> 224;
    a 0-d tensor is one element); 0 when a dtype is unknown."""
    names = dtypes.split(";") if dtypes else []
    total = 0
    for dims, dtype in zip(parse(shapes, dtypes), names, strict=False):
        try:
            total += math.prod(dims) * ITEMSIZE[canonical(dtype)]
        except ValueError:
            return 0
    return total


def codes(column: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Integer codes of a string column (plain or categorical) and its distinct strings;
    a missing value is the empty string."""
    c, uniques = pd.factorize(column, sort=False)
    values = ["" if u is None or (isinstance(u, float) and u != u) else str(u) for u in uniques]
    if (c < 0).any():
        c = np.where(c < 0, len(values), c)
        values.append("")
    return c.astype(np.int64), values


def factorize(*cols: pd.Series) -> tuple[np.ndarray, list[tuple[str, ...]]]:
    """Codes of the distinct combinations of the string columns ``cols``, and the
    combinations (each a tuple of strings)."""
    parts = [codes(c) for c in cols]
    key = np.zeros(len(cols[0]), dtype=np.int64)
    for c, values in parts:
        key = key * (len(values) + 1) + c
    inverse, uniq = pd.factorize(key, sort=False)  # codes in order of first appearance
    first = np.empty(len(uniq), dtype=np.int64)
    first[inverse[::-1]] = np.arange(len(key) - 1, -1, -1)
    combos = [tuple(values[c[i]] for c, values in parts) for i in first]
    return inverse.astype(np.int64), combos


def numel_matrix(shapes: pd.Series, dtypes: pd.Series, width: int = WIDTH) -> np.ndarray:
    """Elements of each row's tensors as an ``(n, width)`` int64 array, -1 where none."""
    c, table = numel_table(shapes, dtypes, width)
    return table[c]


def numel_table(
    shapes: pd.Series, dtypes: pd.Series, width: int = WIDTH
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`numel_matrix` as ``(codes, table)``: row ``i`` is ``table[codes[i]]`` (one row
    per distinct shape and dtype string; index rows before expanding them)."""
    c, uniques = factorize(shapes, dtypes)
    table = np.full((len(uniques) + 1, width), -1, dtype=np.int64)
    for i, (s, d) in enumerate(uniques):
        for j, dims in enumerate(parse(s, d)[:width]):
            table[i, j] = math.prod(dims)
    return c, table


def first_shape(shapes: pd.Series) -> pd.Series:
    """The first tensor's shape string of each row (``"8,3,32,32;16"`` -> ``"8,3,32,32"``)."""
    return first_item(shapes)


def first_dim(shapes: pd.Series) -> np.ndarray:
    """Leading dimension of the first tensor of each row, -1 when it has none."""
    c, uniques = codes(shapes)
    table = np.full(len(uniques) + 1, -1, dtype=np.int64)
    for i, u in enumerate(uniques):
        head = u.split(";")[0].split(",")[0]
        if head.isdigit():
            table[i] = int(head)
    return table[c]


def first_item(column: pd.Series) -> pd.Series:
    """The first ``;``-separated entry of each row (a dtype, a format; "" when none)."""
    c, uniques = codes(column)
    firsts = np.array([u.split(";")[0] for u in uniques] + [""], dtype=object)
    return pd.Series(firsts[c], index=column.index)


first_dtype = first_item


def itemsizes(dtypes: pd.Series) -> np.ndarray:
    """Bytes per element of each row's first dtype (4 when unknown)."""
    c, uniques = codes(first_dtype(dtypes))
    table = np.full(len(uniques) + 1, 4, dtype=np.int64)
    for i, u in enumerate(uniques):
        with contextlib.suppress(ValueError):
            table[i] = ITEMSIZE[canonical(u)]
    return table[c]


def has_dtype(dtypes: pd.Series, names: frozenset[str]) -> np.ndarray:
    """True where any of a row's dtypes is one of ``names``."""
    c, uniques = codes(dtypes)
    table = np.zeros(len(uniques) + 1, dtype=bool)
    for i, u in enumerate(uniques):
        table[i] = any(d in names for d in u.split(";"))
    return table[c]
