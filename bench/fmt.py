"""Number formatting shared by the report's sections: ``median (min-max)`` and friends."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable


def spread(values: Iterable[float], fmt: Callable[[float], str]) -> str:
    """``median (min-max)``, or just the value for one sample, or a dash for none."""
    data = sorted(values)
    if not data:
        return "-"
    if len(data) == 1:
        return fmt(data[0])
    return f"{fmt(statistics.median(data))} ({fmt(data[0])}-{fmt(data[-1])})"


def rate(value: float) -> str:
    return f"{value:,.0f}".replace(",", " ")


def ratio(value: float) -> str:
    return f"{value:.2f}x"


def fixed(digits: int) -> Callable[[float], str]:
    return lambda value: f"{value:.{digits}f}"
