"""Gate values without scientific notation, exact enough to tell a value from its limit."""

from __future__ import annotations

import pytest

from msprof_py.gates.check import Check
from msprof_py.gates.numbers import plain_number, with_unit
from msprof_py.gates.output import value_text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (2097152.0, "2,097,152"),
        (12.5004, "12.5004"),
        (0.000125, "0.000125"),
        (1234.56789, "1,234.57"),
        (-3.25, "-3.25"),
        (0.0, "0"),
        (float("inf"), "inf"),
    ],
)
def test_plain_number(value: float, text: str) -> None:
    assert plain_number(value) == text


def test_checks_and_tables_never_use_an_exponent() -> None:
    check = Check(
        metric="copy_bytes_per_step",
        value=2_097_152.0,
        limit=1_048_576.0,
        ceiling=True,
        passed=False,
        unit="B",
    )
    line = check.describe()
    assert line == "copy_bytes_per_step = 2,097,152 B > limit 1,048,576 B"
    assert "e+" not in value_text(2.09716e06, "B") and with_unit(12.5, "ms") == "12.5 ms"
