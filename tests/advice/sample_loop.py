"""The training loop of the recommendation check's small samples (``transdata_step.py``,
``index_step.py``), written once: the npu device installed, and ``steps`` iterations of
zero_grad, forward, backward and optimizer step.

The samples run as scripts (``python tests/advice/<sample>.py``, directly or through
``apply_fix.py`` next to them), so this module is imported from the script's folder.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

if not hasattr(torch, "npu"):  # a launcher may have installed the device already
    import msprof_py.adapter

    msprof_py.adapter.install()


def train(
    steps: int, optimizer: torch.optim.Optimizer, loss_of: Callable[[int], torch.Tensor]
) -> torch.Tensor:
    """Run ``steps`` training steps: ``loss_of(step)`` builds the step's loss, which is
    back-propagated before ``optimizer`` steps. Returns the last loss (on the device, not
    synchronised: the loop itself has no host sync)."""
    losses = []
    for step in range(steps):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of(step)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return losses[-1]
