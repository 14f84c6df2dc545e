"""What ends a training step (``msprof --steps-from``): torch-free, so the CLI checks it early.

Every ``optimizer.step()`` marks a boundary named ``optimizer#<index>`` (optimizers numbered
0, 1 ... in the order they first step); ``prof.step()`` and ``msprof_py.step()`` mark their own.
The recorder keeps those the ``--steps-from`` choice names.
"""

from __future__ import annotations

from msprof_py.profile.layout import NO_ID

#: what ends a step (``msprof --steps-from``): every ``optimizer.step()`` (until the script
#: marks steps itself), only the script's own marks, or ``"<n>"``: only optimizer n's step()
#: (optimizers numbered 0, 1 ... in the order they first step; a GAN's two optimizers)
STEPS_FROM = ("optimizer", "marks")


def parse_steps_from(value: str) -> str:
    """``value`` checked: ``optimizer``, ``marks`` or an optimizer index; raises ValueError."""
    value = str(value).strip()
    if value in STEPS_FROM or (value.isdigit() and int(value) < 1000):
        return value
    raise ValueError(
        f"--steps-from {value!r}: expected optimizer, marks or an optimizer index (0, 1 ...)"
    )


def split_source(source: str) -> tuple[str, int]:
    """A step mark's source and optimizer index: ``optimizer#1`` -> ``("optimizer", 1)``."""
    name, _, index = source.partition("#")
    return name, int(index) if index.isdigit() else NO_ID
