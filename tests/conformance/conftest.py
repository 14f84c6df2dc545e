"""Conformance tests: code nobody here wrote, run on npu and compared with CPU."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import torchvision_guard

torchvision_guard.guard()
