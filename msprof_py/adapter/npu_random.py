"""``torch.npu.random``: the npu random stream.

The simulated device draws from the CPU default generator, so an npu program and the same
program on CPU draw the same numbers (and train bitwise the same model). One device per process:
the ``*_all`` forms act on that one generator and return or take one-element lists.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

__all__ = [
    "get_rng_state",
    "get_rng_state_all",
    "initial_seed",
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
    "set_rng_state",
    "set_rng_state_all",
]


def manual_seed(seed: int) -> None:
    """Seed the npu generator (the CPU default generator, shared with CPU code)."""
    torch.default_generator.manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    """Same as :func:`manual_seed` (one device per process). Never calls torch.manual_seed."""
    torch.default_generator.manual_seed(int(seed))


def seed() -> None:
    """Seed the generator from a non-deterministic source."""
    torch.default_generator.seed()


def seed_all() -> None:
    """Same as :func:`seed`."""
    torch.default_generator.seed()


def initial_seed() -> int:
    """The seed the generator started from."""
    return torch.default_generator.initial_seed()


def get_rng_state(device: Any = None) -> torch.Tensor:
    """The generator state (a CPU byte tensor)."""
    return torch.default_generator.get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = None) -> None:
    """Restore a generator state from :func:`get_rng_state`."""
    torch.default_generator.set_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    """The states of every npu generator: one, for the one device of the process."""
    return [get_rng_state()]


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    """Restore the states from :func:`get_rng_state_all` (the first one; one device)."""
    states = list(new_states)
    if states:
        set_rng_state(states[0])
