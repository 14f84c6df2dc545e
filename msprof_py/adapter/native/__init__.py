"""The compiled per-op path of the npu adapter (``hot_path.cpp``), when it is built.

``make`` builds it once per environment (``python -m msprof_py.adapter.native build``, about a
minute with g++); the adapter then runs plain ops through it and every other op, or every op
when it is missing, through the pure-Python path, with identical results and timelines.

Where the build lives: ``$MSPROF_NATIVE_DIR``, else ``<sys.prefix>/msprof-native``. A build is
used only if it was made from this very source, torch and Python (``build.json`` records their
digest) and passes a self-test; ``MSPROF_NATIVE=0`` turns it off. :func:`status` says which
path runs and why.
"""

from __future__ import annotations

import hashlib
import json
import sys
import sysconfig
from pathlib import Path
from types import ModuleType

import torch

from msprof_py.device.native import ROW_API_HEADER, LazyBuild, build_dir, import_build

#: the per-op path, and the device guard and hooks it registers in place of torch's Python ones
SOURCES = [Path(__file__).with_name(name) for name in ("hot_path.cpp", "device_guard.cpp")]
MODULE_NAME = "msprof_hot_path"
#: the contract version of ``run()`` this Python side expects (``kAbiVersion`` in the source)
ABI_VERSION = 24
_RECORD = "build.json"


#: NDEBUG: no debug-only checks, among them pybind11's GIL check on every reference count
#: change (about 2k instructions per op)
COMPILE_FLAGS = ["-O2", "-DNDEBUG"]


def source_digest() -> str:
    """What a build must match: the source, its compile flags, torch's version and the Python
    ABI."""
    digest = hashlib.sha256()
    for source in (*SOURCES, ROW_API_HEADER):
        digest.update(source.read_bytes())
    digest.update(" ".join(COMPILE_FLAGS).encode())
    digest.update(torch.__version__.encode())
    digest.update(str(sysconfig.get_config_var("EXT_SUFFIX")).encode())
    return digest.hexdigest()


def build(folder: Path | None = None, verbose: bool = False) -> Path:
    """Compile :data:`SOURCES` into ``folder`` (default :func:`build_dir`); the module's path.

    Raises whatever the compiler or ``torch.utils.cpp_extension`` raises."""
    from torch.utils import cpp_extension

    folder = build_dir() if folder is None else folder
    folder.mkdir(parents=True, exist_ok=True)
    (folder / _RECORD).unlink(missing_ok=True)
    cpp_extension.load(
        MODULE_NAME,
        [str(source) for source in SOURCES],
        extra_cflags=COMPILE_FLAGS,
        # the recorder's row sink calls (device/native/row_api.h)
        extra_include_paths=[str(ROW_API_HEADER.parent)],
        build_directory=str(folder),
        verbose=verbose,
    )
    module = _module_file(folder)
    if module is None:
        raise RuntimeError(f"the build left no {MODULE_NAME} module in {folder}")
    (folder / _RECORD).write_text(json.dumps({"digest": source_digest()}), encoding="utf-8")
    return module


def _module_file(folder: Path) -> Path | None:
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    for name in (MODULE_NAME + suffix, MODULE_NAME + ".so"):
        if (folder / name).is_file():
            return folder / name
    return None


def _import(folder: Path) -> tuple[ModuleType | None, str]:
    return import_build(
        MODULE_NAME, _module_file(folder), folder / _RECORD, source_digest(), ABI_VERSION
    )


_BUILD = LazyBuild(lambda: _import(build_dir()))
#: the compiled module, or None when the Python path runs (:func:`status` says why); looked up
#: once per process
load = _BUILD.load
#: use the Python path from now on (the self-test failed)
disable = _BUILD.disable
#: which per-op path runs, and why (for ``msprof doctor`` and the benchmarks)
status = _BUILD.status


def self_test(module: ModuleType) -> str | None:
    """Set the module up and check that its npu tensors are what torch's Python backend makes
    (once the npu device is registered); None when they are, else what differs."""
    from msprof_py.adapter.errors import raise_oom
    from msprof_py.device import NpuOutOfMemoryError

    theirs = torch._C._acc.create_empty_tensor((2, 3), torch.float32)
    module.init(theirs, NpuOutOfMemoryError, raise_oom)
    ours = module.adopt(torch.empty(2, 3))
    for what, a, b in (
        ("dispatch keys", torch._C._dispatch_keys(ours), torch._C._dispatch_keys(theirs)),
        ("device", ours.device, theirs.device),
        ("strides", ours.stride(), theirs.stride()),
        ("storage bytes", ours.untyped_storage().nbytes(), theirs.untyped_storage().nbytes()),
    ):
        if a != b:
            return f"{what} differ ({a} against {b})"
    if module.storage_backing(ours) is None:
        return "its tensors have no backing storage"
    return None


def _why(exc: BaseException) -> str:
    """The compiler's first error line, else the exception's text (one line, bounded)."""
    text = str(exc)
    errors = [line for line in text.splitlines() if " error: " in line or "error:" in line[:8]]
    return " ".join((errors[0] if errors else text).split())[:300]


def main(argv: list[str] | None = None) -> int:
    """``python -m msprof_py.adapter.native build|status``."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["build"]:
        try:
            path = build(verbose="-v" in args)
        except Exception as exc:
            print(
                f"msprof: warning: the compiled per-op path did not build ({_why(exc)}); "
                "the Python path will run",
                file=sys.stderr,
            )
            return 0 if "--check" not in args else 1
        print(f"msprof: built the compiled per-op path: {path}")
        return 0
    if args[:1] == ["status"]:
        print(status())
        return 0
    print(
        "usage: python -m msprof_py.adapter.native build [--check] [-v] | status", file=sys.stderr
    )
    return 2
