"""Output files that appear whole or not at all, and never replace an existing file.

Every file msprof writes next to a profile (exports, traces, the report) goes through
:func:`create_atomically`: the content is written to a temporary name in the same folder,
flushed to disk, then linked to its final name, which must not exist yet (the ``"x"`` mode of
``open``). A full disk, a crash or an exception while writing leaves no file under the final
name, never a truncated one that looks complete.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


@contextlib.contextmanager
def create_atomically(
    path: str | Path, mode: str = "x", *, overwrite: bool = False, **kwargs: Any
) -> Iterator[IO[Any]]:
    """``open(path, mode)`` for a new file (mode ``"x"`` or ``"xb"``), made atomic.

    Raises ``FileExistsError`` if ``path`` exists (before writing, and again if it appeared
    meanwhile); on any error the temporary file is removed and nothing is left at ``path``.
    ``overwrite``: replace an existing file instead (atomically: readers see the old file or
    the new one, never a mix).
    """
    if mode not in ("x", "xb"):
        raise ValueError(f"create_atomically writes new files only (mode 'x' or 'xb'), not {mode}")
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} already exists")
    if overwrite and path.is_dir():
        raise IsADirectoryError(f"{path} is a folder")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        with open(tmp, mode.replace("x", "w"), **kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        if overwrite:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # fails if the name was taken meanwhile: never replaces a file
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
