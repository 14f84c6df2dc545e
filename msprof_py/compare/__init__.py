"""``msprof compare BASE NEW``: two profiles side by side (msprof-analyze compare's sheets).

from msprof_py.compare import compare
result = compare("runs/before", "runs/after")     # paths or Profiles
result.overall                                     # OverallMetrics: compute classes, free, E2E
result.operators                                   # OperatorCompare: matched ops, by |diff|
result.to_json()                                   # the --json document

Torch-free. Works on any Profile :func:`msprof_py.load` returns (recorded runs and imported
traces alike): it reads only the profile tables and the analysers' step windows.
"""

from msprof_py.compare.core import (
    PROJECTION_LABEL,
    SHEETS,
    Comparison,
    compare,
)
from msprof_py.compare.side import CompareError

__all__ = ["PROJECTION_LABEL", "SHEETS", "CompareError", "Comparison", "compare"]
