"""The Python call stack of a host op (``msprof --with-stack``), as one interned string.

A stack is the application's frames, outermost first, each ``file:line(function)``, joined by
``;`` (the folded flame graph format's separator, so a stack is ready to be folded). Frames
of msprof_py (the recorder, the adapter, the bootstrap) and of torch (``nn.Module.__call__``,
``torch.nn.functional``, autograd's Python entry points) are left out, wherever they are: what
remains is the user's code down to the line that called the op. At most ``depth`` frames are
kept, the innermost ones.

Memory stays bounded: a training loop runs the same few hundred call sites over and over, and
every distinct stack is one string object shared by all the rows that hold it (the writer
stores the column dictionary-encoded). Files are shown relative to the working directory
when they lie inside it.
"""

from __future__ import annotations

import os
import sys
from types import CodeType, FrameType

import torch

import msprof_py

#: frames kept per stack (the innermost ones)
DEFAULT_DEPTH = 32
#: distinct stacks remembered before the cache starts over (the strings already recorded stay)
CACHE_LIMIT = 65_536
#: files of these folders are never frames of a recorded stack
_SKIPPED = tuple(
    os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in (msprof_py, torch) if m.__file__
)
#: the interpreter's own start-up frames (``python -m``)
_SKIPPED_NAMES = ("<frozen runpy>", "<frozen importlib._bootstrap>", "runpy.py")


class StackRecorder:
    """Captures the current Python stack as a frame string (see the module docstring)."""

    __slots__ = ("_codes", "_cwd", "_stacks", "depth")

    def __init__(self, depth: int = DEFAULT_DEPTH) -> None:
        self.depth = depth
        self._cwd = os.getcwd() + os.sep
        #: code object -> (``file:``, ``(function)``) around the line; () to skip it
        self._codes: dict[CodeType, tuple[str, ...]] = {}
        #: (code, line, code, line ...) innermost first -> the joined stack
        self._stacks: dict[tuple, str] = {}

    def _label(self, code: CodeType) -> tuple[str, ...]:
        path = code.co_filename
        full = os.path.abspath(path) if not path.startswith("<") else path
        label: tuple[str, ...] = ()
        if not (full.startswith(_SKIPPED) or os.path.basename(full) in _SKIPPED_NAMES):
            shown = full[len(self._cwd) :] if full.startswith(self._cwd) else full
            name = getattr(code, "co_qualname", code.co_name)
            label = (f"{shown}:".replace(";", ","), f"({name})".replace(";", ","))
        self._codes[code] = label
        return label

    def capture(self, frame: FrameType | None = None) -> str:
        """The stack of ``frame`` (default: the caller's), outermost first."""
        f = frame if frame is not None else sys._getframe(1)
        codes = self._codes
        key: list = []  # code, instruction offset, ... (cheaper than line numbers)
        kept: list[FrameType] = []
        depth = self.depth
        while f is not None and len(kept) < depth:
            code = f.f_code
            label = codes.get(code)
            if label is None:
                label = self._label(code)
            if label:
                key.append(code)
                key.append(f.f_lasti)
                kept.append(f)
            f = f.f_back
        found = self._stacks.get(k := tuple(key))
        if found is None:
            frames = []
            for frame_ in reversed(kept):
                before, after = codes[frame_.f_code]
                frames.append(f"{before}{frame_.f_lineno}{after}")
            found = ";".join(frames)
            if len(self._stacks) >= CACHE_LIMIT:
                self._stacks.clear()
            self._stacks[k] = found
        return found
