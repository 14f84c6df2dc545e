"""Models for the tuner tests, importable by the trial processes (tests/tune on sys.path)."""

from __future__ import annotations

from torch import nn

#: the hidden width of :func:`wide`: each sample's activation is WIDTH float32 values
WIDTH = 65536


def wide() -> nn.Module:
    """Linear(1024 -> 65536) + ReLU + Linear(65536 -> 10): at the peak of a step (the
    backward of the second layer) three WIDTH-wide float32 tensors per sample are live (the
    ReLU output it saved, its gradient and the first layer's output gradient)."""
    return nn.Sequential(nn.Linear(1024, WIDTH), nn.ReLU(), nn.Linear(WIDTH, 10))
