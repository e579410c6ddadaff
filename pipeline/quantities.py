"""Resource quantities as a user writes them: CPU counts and GPU amounts (exact fractions: shares of one
device below 1, whole counts above), checked, and formatted back the way they were written."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from pipeline.errors import ConfigError

ZERO = Fraction(0)


def fmt(value) -> str:
    """A resource amount as a user wrote it: 2, 0.5, 0.25."""
    if isinstance(value, Fraction):
        return str(value.numerator) if value.denominator == 1 else f"{float(value):g}"
    return f"{value:g}" if isinstance(value, float) else str(value)


def gpu_amount(value: Any, key: str) -> Fraction:
    """Validate a GPU amount: >= 0, any fraction below 1, whole numbers from 1 up."""
    if isinstance(value, bool) or not isinstance(value, (int, float, Fraction)):
        raise ConfigError(f"{key}={value!r} is not a number; give a GPU count such as 1, 2 or a share such as 0.5")
    if value < 0:
        raise ConfigError(f"{key}={fmt(value)} is negative; a GPU amount is 0, a share below 1 (0.5, 0.25) or a whole count")
    amount = Fraction(value).limit_denominator(10_000)
    if amount > 1 and amount.denominator != 1:
        raise ConfigError(
            f"{key}={fmt(value)}: above 1 a GPU count must be whole (2, 3, ...); "
            "shares of one device are allowed below 1 (0.5, 0.25)"
        )
    return amount


def cpu_count(value: Any, key: str) -> int:
    """Validate a CPU count: a whole number >= 1."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise ConfigError(f"{key}={value!r} is not a whole number of CPUs; give an integer >= 1")
    if value < 1:
        raise ConfigError(f"{key}={fmt(value)} must be at least 1 CPU")
    return int(value)
