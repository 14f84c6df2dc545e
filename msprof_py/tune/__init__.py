"""The auto batch tuner: the largest batch whose peak device memory stays within a share of
the device, found by measuring steps rather than extrapolating.

:func:`auto_batch` builds the model from a factory in a fresh process per batch size tried,
on the simulated device in shapes-only mode (no values are computed, so batch 256 of a large
model costs seconds), runs two training steps, and reads the peak reserved device memory
(``torch.npu.max_memory_reserved``) against the device's memory (``torch.npu.mem_get_info``,
the ``aclrtGetMemInfo`` of the seed) and the simulated time of the second step. Batches double
from ``min_batch`` until one no longer fits (or ``max_batch``, 256 by default, as the seed's
tuner caps it), then the last interval is bisected. ``msprof tune-batch`` does the same for a
whole training script through its batch-size option (:mod:`msprof_py.tune.command`).
"""

from __future__ import annotations

from msprof_py.tune.search import Trial, TuneResult, search
from msprof_py.tune.trials import auto_batch

__all__ = ["Trial", "TuneResult", "auto_batch", "search"]
