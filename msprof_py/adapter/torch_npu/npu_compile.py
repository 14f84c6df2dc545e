"""``torch_npu.npu.set_compile_mode``: online compilation or prebuilt binary kernels.

``set_compile_mode(jit_compile=True)`` compiles every op online for each new key (op, shapes,
dtypes, formats, attributes); ``jit_compile=False`` runs the prebuilt binary kernels and only
tiles a new key on the host. The chip's default comes from the device spec (``[compile]
jit_compile``: True on 910A and the inference chips, False on Atlas A2/A3); costs and OP State
are described in :mod:`msprof_py.adapter.compile_cache`.

``set_option({"ACL_OP_COMPILER_CACHE_MODE": ..., "ACL_OP_COMPILER_CACHE_DIR": ...})`` sets ACL's
on-disk op compile cache (:mod:`msprof_py.adapter.op_disk_cache`) from the program, over the
environment variables of the same names, as torch_npu gives its options precedence; the other
ACL options torch_npu takes are accepted and not modelled.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from msprof_py.adapter import op_disk_cache, runtime


def set_compile_mode(jit_compile: bool = True) -> None:
    """Compile ops online (``True``) or use binary kernels (``False``) from now on."""
    if not isinstance(jit_compile, bool):
        raise TypeError(f"set_compile_mode: jit_compile must be True or False, got {jit_compile!r}")
    runtime.state().compiled.set_mode(jit_compile)


def is_jit_compile_false() -> bool:
    """True when binary kernels run (``set_compile_mode(jit_compile=False)`` or the default)."""
    return not runtime.state().compiled.jit


def set_option(option: Mapping[str, object]) -> None:
    """ACL compile options as a dict; the op compile cache's mode and folder take effect."""
    if not isinstance(option, Mapping):
        raise TypeError(f"set_option: option must be a dict, got {type(option).__name__}")
    names = (op_disk_cache.ENV_MODE, op_disk_cache.ENV_DIR)
    given = {k: str(option[k]) for k in names if k in option}
    if not given:
        return
    keys = (*names, op_disk_cache.ENV_PATH)
    env = {k: v for k, v in os.environ.items() if k in keys} | given
    state = runtime.state()
    state.compiled.disk = op_disk_cache.from_env(state.npu.spec.soc_version, env)


def attach(npu: object) -> None:
    """Give ``torch.npu`` (``torch_npu.npu``) the compile-mode functions, as torch_npu does."""
    for fn in (set_compile_mode, is_jit_compile_false, set_option):
        setattr(npu, fn.__name__, fn)
