"""Op names across stacks: the compute family of a CANN op type, a CUDA kernel or an ATen op,
and the user's ``--op-name-map``.

A family is what ``msprof compare`` classifies and matches by when names differ: the same
matrix multiply is ``MatMulV2`` on the NPU, ``ampere_sgemm_128x64_nn`` or
``volta_sgemm_*`` as a CUDA kernel and ``aten::mm``/``aten::addmm`` as a host op. The rules
follow msprof-analyze's classification of ``kernel_details.csv``'s Type (``flashattention`` is
FA, ``matmul`` is MatMul, a Type starting with ``conv`` is Conv; ``grad``/``bwd`` marks the
backward pass), widened to the CUDA and ATen spellings.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path

FLASH_ATTENTION = "FlashAttentionScore"
CONV = "Conv2D"
MATMUL = "MatMul"

#: (family, pattern), tried in order: conv before matmul (cuDNN's implicit-GEMM conv kernels
#: say "gemm" too)
FAMILIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        FLASH_ATTENTION,
        re.compile(
            r"flash|sdpa|scaled_dot_product|fmha|fused_attention|efficient_attention"
            r"|promptflashattention|increflashattention",
            re.IGNORECASE,
        ),
    ),
    (
        CONV,
        re.compile(
            r"^conv|aten::_?conv|aten::cudnn_conv|cudnn.*conv|conv.*cudnn|_fprop|_dgrad|_wgrad"
            r"|implicit_?gemm|winograd|depthwise",
            re.IGNORECASE,
        ),
    ),
    (
        MATMUL,
        re.compile(
            r"matmul|gemm|gemv|aten::(mm|bmm|addmm|addbmm|baddbmm|linear|matmul|_addmm_activation)"
            r"\b|cublas|cutlass|batchmatmul",
            re.IGNORECASE,
        ),
    ),
)
_BACKWARD = re.compile(r"grad|bwd|backward|backprop", re.IGNORECASE)


def family(*texts: str) -> str:
    """The compute family (``FlashAttentionScore``, ``Conv2D``, ``MatMul``) of the first of
    ``texts`` (an op type, a kernel or op name) that has one; ``""`` when none has."""
    for text in texts:
        if not text:
            continue
        for name, pattern in FAMILIES:
            if pattern.search(text):
                return name
    return ""


def is_backward(*texts: str) -> bool:
    """Whether any of ``texts`` names backward-pass work (``grad``, ``bwd``, ``backward``)."""
    return any(text and _BACKWARD.search(text) for text in texts)


class OpNameMapError(ValueError):
    """An ``--op-name-map`` entry that is neither ``a=b`` nor a readable map file."""


def parse_op_name_map(entries: Iterable[str]) -> dict[str, str]:
    """``--op-name-map`` entries as one map (base name -> the name it matches on the new side).

    Each entry is ``a=b`` (several separated by ``,``) or a file: JSON (an object of name
    pairs) or text with one ``a=b`` a line (``#`` starts a comment). Later entries win."""
    out: dict[str, str] = {}
    for entry in entries:
        if "=" in entry:
            for pair in entry.split(","):
                out.update(_pair(pair, f"--op-name-map {entry!r}"))
        elif Path(entry).is_file():
            out.update(_read_map_file(Path(entry)))
        else:
            raise OpNameMapError(
                f"--op-name-map {entry!r}: expected a=b pairs or a map file (no such file)"
            )
    return out


def _pair(text: str, where: str) -> dict[str, str]:
    left, sep, right = text.partition("=")
    if not sep or not left.strip() or not right.strip():
        raise OpNameMapError(f"{where}: expected a=b, got {text.strip()!r}")
    return {left.strip(): right.strip()}


def _read_map_file(path: Path) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise OpNameMapError(f"--op-name-map {path}: cannot read ({exc})") from None
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise OpNameMapError(f"--op-name-map {path}: not valid JSON ({exc.msg})") from None
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
            raise OpNameMapError(f"--op-name-map {path}: names must be strings")
        return dict(data)
    out: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if line:
            out.update(_pair(line, f"--op-name-map {path}, line {number}"))
    return out
