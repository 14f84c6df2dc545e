"""ACL's on-disk op compile cache: kernels compiled online in one run are reused by the next.

CANN keeps the kernels it compiles online (single-op mode, ``jit_compile=True``) in a folder on
disk: ``ACL_OP_COMPILER_CACHE_MODE`` is ``enable`` (the default), ``disable`` or ``force`` (empty
the cache first, for a changed environment), and the folder is ``ACL_OP_COMPILER_CACHE_DIR``,
else ``ASCEND_CACHE_PATH``, else ``$HOME/atc_data`` (hiascend, PyTorch environment variables,
"ACL_OP_COMPILER_CACHE_DIR"/"ACL_OP_COMPILER_CACHE_MODE"; graph mode does not use it). A key
(op, shapes, dtypes, formats, attributes) found there costs no online compile.

The simulator keeps, per chip, the digests of the keys it compiled in one file under the
folder (``msprof_op_cache/<soc_version>.keys``, one line per key, appended as keys are
compiled, so parallel ranks can share it). One departure: it uses a disk cache only when a
folder is named (``ACL_OP_COMPILER_CACHE_DIR`` or ``ASCEND_CACHE_PATH``), never
``$HOME/atc_data`` by default, so that a run's compile costs do not depend on earlier runs
unless asked. Loading a cached kernel costs no modelled host time [U]. Binary kernels
(``jit_compile=False``) are prebuilt: the cache plays no part.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from collections.abc import Mapping
from pathlib import Path

ENV_MODE = "ACL_OP_COMPILER_CACHE_MODE"
ENV_DIR = "ACL_OP_COMPILER_CACHE_DIR"
ENV_PATH = "ASCEND_CACHE_PATH"
MODES = ("enable", "disable", "force")
#: the cache's folder under the named directory
SUBDIR = "msprof_op_cache"


def digest(key: tuple) -> str:
    """A stable name of a compile key (its text, hashed): the same in every process."""
    return hashlib.sha1(repr(key).encode("utf-8"), usedforsecurity=False).hexdigest()[:24]


class DiskCache:
    """The compiled keys of one chip in a cache folder (see the module)."""

    def __init__(self, folder: str | Path, soc_version: str, *, force: bool = False) -> None:
        self.path = Path(folder) / SUBDIR / f"{soc_version or 'unknown'}.keys"
        self.digests: set[str] = set()
        #: keys found on disk, and keys written
        self.hits = self.writes = 0
        self._writable = True
        if force:
            try:
                self.path.unlink(missing_ok=True)
            except OSError as exc:
                self._disable(f"cannot empty it ({exc.strerror or exc})")
        else:
            try:
                self.digests = set(self.path.read_text(encoding="utf-8").split())
            except FileNotFoundError:
                pass
            except OSError as exc:
                self._disable(f"cannot read it ({exc.strerror or exc})")

    def _disable(self, why: str) -> None:
        self._writable = False
        warnings.warn(f"op compile cache {self.path}: {why}; compiling without it", stacklevel=3)

    def lookup(self, key: tuple) -> bool:
        """Whether ``key`` was compiled into this cache before (counted as a hit)."""
        if digest(key) in self.digests:
            self.hits += 1
            return True
        return False

    def store(self, key: tuple) -> None:
        """Remember ``key`` as compiled (one line appended to the file)."""
        name = digest(key)
        if name in self.digests:
            return
        self.digests.add(name)
        if not self._writable:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as out:
                out.write(name + "\n")
            self.writes += 1
        except OSError as exc:
            self._disable(f"cannot write it ({exc.strerror or exc})")


def from_env(soc_version: str, env: Mapping[str, str] | None = None) -> DiskCache | None:
    """The disk cache the environment names (None: mode ``disable``, or no folder named)."""
    env = os.environ if env is None else env
    mode = env.get(ENV_MODE, "enable").strip().lower() or "enable"
    if mode not in MODES:
        warnings.warn(
            f"{ENV_MODE}={env.get(ENV_MODE)!r} is not one of {', '.join(MODES)}; "
            "the op compile cache is off",
            stacklevel=2,
        )
        return None
    folder = env.get(ENV_DIR) or env.get(ENV_PATH)
    if mode == "disable" or not folder:
        return None
    return DiskCache(folder, soc_version, force=mode == "force")
