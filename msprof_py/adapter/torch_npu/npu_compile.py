"""``torch_npu.npu.set_compile_mode``: online compilation or prebuilt binary kernels.

``set_compile_mode(jit_compile=True)`` compiles every op online for each new key (op, shapes,
dtypes, formats, attributes); ``jit_compile=False`` runs the prebuilt binary kernels and only
tiles a new key on the host. The chip's default comes from the device spec (``[compile]
jit_compile``: True on 910A and the inference chips, False on Atlas A2/A3); costs and OP State
are described in :mod:`msprof_py.adapter.compile_cache`.
"""

from __future__ import annotations

from msprof_py.adapter import runtime


def set_compile_mode(jit_compile: bool = True) -> None:
    """Compile ops online (``True``) or use binary kernels (``False``) from now on."""
    if not isinstance(jit_compile, bool):
        raise TypeError(f"set_compile_mode: jit_compile must be True or False, got {jit_compile!r}")
    runtime.state().compiled.set_mode(jit_compile)


def is_jit_compile_false() -> bool:
    """True when binary kernels run (``set_compile_mode(jit_compile=False)`` or the default)."""
    return not runtime.state().compiled.jit


def attach(npu: object) -> None:
    """Give ``torch.npu`` (``torch_npu.npu``) the compile-mode functions, as torch_npu does."""
    for fn in (set_compile_mode, is_jit_compile_false):
        setattr(npu, fn.__name__, fn)
