"""Gate figures as people read them: exact enough to tell a value from its limit, never in
scientific notation (``2,097,152 B``, ``12.5004 ms``, ``0.000125``)."""

from __future__ import annotations

import math

#: significant digits a gate value keeps (as ``.6g`` did, without its exponent)
DIGITS = 6


def plain_number(value: float, digits: int = DIGITS) -> str:
    """``value`` with ``digits`` significant digits, thousands separators and no exponent;
    whole numbers in full (``2,097,152``), ``inf``/``nan`` as such."""
    if math.isinf(value) or math.isnan(value):
        return str(value)
    if value == int(value):
        return f"{int(value):,}"
    magnitude = math.floor(math.log10(abs(value)))
    decimals = max(0, digits - 1 - magnitude)
    return f"{value:,.{decimals}f}".rstrip("0").rstrip(".")


def with_unit(value: float, unit: str = "") -> str:
    """:func:`plain_number` followed by its unit, if any."""
    text = plain_number(value)
    return f"{text} {unit}" if unit else text
