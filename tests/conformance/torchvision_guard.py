"""Make torchvision's Python parts importable where its C++ ops cannot load.

timm imports torchvision at import time, and transformers does when it is installed. The only
torchvision wheel the package index offers here is a CUDA build whose C++ extension does not
load against the CPU torch; its import then dies registering fake kernels for ``torchvision::nms``
(an operator that does not exist without the extension), and takes timm and transformers down
with it. Nothing the conformance tests use needs those C++ ops (detection ops such as nms,
roi_align, deform_conv), so when the extension is missing the meta registrations are skipped.
With a torchvision whose extension loads, this does nothing.
"""

from __future__ import annotations

import importlib.util
import sys
import types


def _extension_loads() -> bool:
    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.submodule_search_locations is None:
        return True  # no torchvision: nothing to guard
    import torch

    try:
        torch.ops.load_library(_extension_path(spec.submodule_search_locations[0]))
    except (OSError, RuntimeError):
        return False
    return True


def _extension_path(package_dir: str) -> str:
    import glob
    import os

    found = glob.glob(os.path.join(package_dir, "_C*.so"))
    if not found:
        raise OSError("torchvision has no C++ extension")
    return found[0]


def guard() -> None:
    """Skip torchvision's meta registrations if its C++ ops are missing (idempotent)."""
    name = "torchvision._meta_registrations"
    if "torchvision" in sys.modules or name in sys.modules:
        return
    if not _extension_loads():
        sys.modules[name] = types.ModuleType(name)
