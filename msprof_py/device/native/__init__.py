"""The compiled cores of the engine (``engine_core.c``) and of the caching allocator
(``allocator_core.c``), and the recorder's columnar row buffers (``rows_core.c``): one module,
when it is built.

Plain C against the CPython API: no torch, like the rest of ``device/``. ``make`` builds it once
per environment (``python -m msprof_py.device.native build``, a few seconds with the system C
compiler); :class:`~msprof_py.device.engine.Engine` then subclasses its ``EngineCore`` instead
of the Python one (:mod:`msprof_py.device.schedule`), and
:class:`~msprof_py.device.caching.CachingAllocator` its ``AllocatorCore`` instead of
:mod:`msprof_py.device.caching_core`, with identical timelines and memory records. The raw
profile writer buffers rows in its ``RowBuffer`` columns instead of Python tuples, and while
the recorder is the record bus's only subscriber the cores write kernel launch and allocator
rows into them directly (``RowSink``), with the same tables as the record path.

Where the build lives: ``$MSPROF_NATIVE_DIR``, else ``<sys.prefix>/msprof-native`` (beside the
adapter's compiled path). A build is used only if it was made from this very source and Python
ABI (``device-core.json`` records their digest) and keeps the contract version this side
expects; ``MSPROF_NATIVE=0`` turns it off, as it does the adapter's. :func:`status` says which
core runs and why.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shlex
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

SOURCES = tuple(
    Path(__file__).with_name(name) for name in ("engine_core.c", "allocator_core.c", "rows_core.c")
)
#: the row sink's C calls for other compiled code (the adapter's per-op path includes it too)
ROW_API_HEADER = Path(__file__).with_name("row_api.h")
MODULE_NAME = "msprof_device_core"
#: the contract version this Python side expects (``ABI_VERSION`` in the source)
ABI_VERSION = 4
_RECORD = "device-core.json"


def build_dir() -> Path:
    """The folder holding the build (``$MSPROF_NATIVE_DIR`` or ``<sys.prefix>/msprof-native``)."""
    configured = os.environ.get("MSPROF_NATIVE_DIR")
    return Path(configured) if configured else Path(sys.prefix) / "msprof-native"


def source_digest() -> str:
    """What a build must match: the source and the Python ABI."""
    digest = hashlib.sha256()
    for source in (*SOURCES, ROW_API_HEADER):
        digest.update(source.read_bytes())
    digest.update(str(sysconfig.get_config_var("EXT_SUFFIX")).encode())
    digest.update(sys.version.encode())
    return digest.hexdigest()


def _module_path(folder: Path) -> Path:
    return folder / (MODULE_NAME + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"))


def compile_command(output: Path) -> list[str]:
    """The compiler call that builds the module (``$CC`` or Python's configured compiler)."""
    compiler = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    include = sysconfig.get_paths()["include"]
    return [
        *shlex.split(compiler),
        "-O2",
        "-shared",
        "-fPIC",
        "-Wall",
        f"-I{include}",
        *(str(source) for source in SOURCES),
        "-o",
        str(output),
    ]


def build(folder: Path | None = None) -> Path:
    """Compile the sources into ``folder`` (default :func:`build_dir`); the module's path.

    Raises :class:`RuntimeError` with the compiler's first error line when it fails."""
    folder = build_dir() if folder is None else folder
    folder.mkdir(parents=True, exist_ok=True)
    (folder / _RECORD).unlink(missing_ok=True)
    output = _module_path(folder)
    partial = output.with_name(output.name + ".partial")
    try:
        done = subprocess.run(compile_command(partial), capture_output=True, text=True, check=False)
    except OSError as exc:
        raise RuntimeError(f"no C compiler ({exc})") from None
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if "error" in line]
        raise RuntimeError(errors[0] if errors else done.stderr.strip() or "compiler failed")
    partial.replace(output)
    (folder / _RECORD).write_text(json.dumps({"digest": source_digest()}), encoding="utf-8")
    return output


def import_build(
    name: str, path: Path | None, record: Path, digest: str, abi_version: int
) -> tuple[ModuleType | None, str]:
    """Import the compiled module ``name`` at ``path`` if its build ``record`` (JSON with a
    ``digest``) matches ``digest`` and it keeps contract ``abi_version``: (module, why) or
    (None, why not). Shared by this package's and the adapter's compiled parts."""
    folder = record.parent
    if os.environ.get("MSPROF_NATIVE", "1") == "0":
        return None, "turned off (MSPROF_NATIVE=0)"
    if path is None or not path.is_file():
        return None, f"not built (no {name} in {folder}; run make)"
    try:
        recorded = json.loads(record.read_text(encoding="utf-8"))["digest"]
    except (OSError, ValueError, KeyError, TypeError):
        return None, f"build in {folder} has no valid {record.name}"
    if recorded != digest:
        return None, f"build in {folder} is stale (made from other sources)"
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as exc:  # a broken build must never stop the profiler: Python runs
        return None, f"build in {folder} does not load: {' '.join(str(exc).split())}"
    if module.abi_version() != abi_version:
        return None, f"build in {folder} keeps contract {module.abi_version()}, not {abi_version}"
    return module, f"compiled ({path})"


class LazyBuild:
    """A compiled module imported on first use, once per process, with why it is (not) in use:
    the device cores' and the adapter's per-op path each keep one."""

    def __init__(self, importer: Callable[[], tuple[ModuleType | None, str]]) -> None:
        self._importer = importer
        self._module: ModuleType | None = None
        self._reason = "not loaded yet"
        self._tried = False

    def load(self) -> ModuleType | None:
        """The compiled module, or None when the Python code runs (:meth:`status` says why)."""
        if not self._tried:
            self._tried = True
            self._module, self._reason = self._importer()
        return self._module

    def disable(self, reason: str) -> None:
        """Run the Python code from now on, because of ``reason``."""
        self._tried = True
        self._module, self._reason = None, reason

    def status(self) -> str:
        """Which code runs (compiled or Python), and why."""
        self.load()
        return self._reason if self._module is not None else f"Python ({self._reason})"


def _import(folder: Path) -> tuple[ModuleType | None, str]:
    return import_build(
        MODULE_NAME, _module_path(folder), folder / _RECORD, source_digest(), ABI_VERSION
    )


_BUILD = LazyBuild(lambda: _import(build_dir()))
#: the compiled module, or None when the Python cores run (:func:`status` says why); looked up
#: once per process
load = _BUILD.load
#: which device cores run (compiled or Python), and why (for the benchmarks)
status = _BUILD.status


def main(argv: list[str] | None = None) -> int:
    """``python -m msprof_py.device.native build|status``."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["build"]:
        try:
            path = build()
        except RuntimeError as exc:
            why = " ".join(str(exc).split())[:300]
            print(
                f"msprof: warning: the compiled device cores did not build ({why}); "
                "the Python cores will run",
                file=sys.stderr,
            )
            return 0 if "--check" not in args else 1
        print(f"msprof: built the compiled device cores (engine, allocator, rows): {path}")
        return 0
    if args[:1] == ["status"]:
        print(status())
        return 0
    print("usage: python -m msprof_py.device.native build [--check] | status", file=sys.stderr)
    return 2
