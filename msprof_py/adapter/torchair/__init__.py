"""The ``torchair`` import shim: TorchAir's graph-mode API on the simulated NPU.

``import torchair`` (after ``msprof_py.adapter.install()``) resolves here through the import
hook that serves ``torch_npu``. ``torchair.get_npu_backend(compiler_config=...)`` returns the
``"npu"`` Dynamo backend bound to the config; ``torchair.CompilerConfig()`` carries ``mode``
("max-autotune", the default, or "reduce-overhead") and TorchAir's sections as plain
namespaces (accepted, not interpreted); ``torchair.get_compiler(config)`` is the FX compiler
for ``aot_module_simplified``. ``torchair.inference.set_dim_gears(t, dim_gears)`` sets GE's
dynamic gears on an input (:mod:`msprof_py.graph.gears`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import SimpleNamespace
from typing import Any

__version__ = "0.1+msprof"

_SECTIONS = (
    "debug",
    "export",
    "dump_config",
    "fusion_config",
    "experimental_config",
    "inference_config",
    "ge_config",
    "aclgraph_config",
)


class CompilerConfig:
    """TorchAir's compiler configuration: ``mode`` and its sections (namespaces)."""

    def __init__(self) -> None:
        self.mode = "max-autotune"
        for section in _SECTIONS:
            setattr(self, section, SimpleNamespace())

    def __repr__(self) -> str:
        return f"CompilerConfig(mode={self.mode!r})"


def _config(compiler_config: CompilerConfig | None) -> Any:
    from msprof_py.graph.backend import resolve_config

    return resolve_config(compiler_config if compiler_config is not None else CompilerConfig())


def get_npu_backend(
    *, compiler_config: CompilerConfig | None = None, custom_decompositions: Mapping | None = None
) -> Callable[..., Any]:
    """A ``torch.compile`` backend running graphs on the npu as ``compiler_config`` says."""
    from msprof_py.graph.backend import make_backend

    return make_backend(_config(compiler_config), custom_decompositions or {})


def get_compiler(compiler_config: CompilerConfig | None = None) -> Callable[..., Any]:
    """The FX compiler (``fw_compiler`` for ``aot_module_simplified``): compiles one ATen
    graph into a boxed callable that runs it as a graph launch."""
    from msprof_py.graph.backend import graph_compiler

    return graph_compiler(_config(compiler_config))


def _set_dim_gears(t: Any, dim_gears: Mapping[int, Any]) -> None:
    """Split a dynamic graph into gears on ``t``'s dimensions (``{dim: [sizes]}``)."""
    from msprof_py.graph.gears import set_dim_gears

    set_dim_gears(t, dim_gears)


#: ``torchair.inference``
inference = SimpleNamespace(set_dim_gears=_set_dim_gears)

__all__ = ["CompilerConfig", "get_compiler", "get_npu_backend", "inference"]
