"""Figures shared by the report's sections: ``median (min-max)``, percentiles, number formats."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol


def spread(values: Iterable[float], fmt: Callable[[float], str]) -> str:
    """``median (min-max)``, or just the value for one sample, or a dash for none."""
    data = sorted(values)
    if not data:
        return "-"
    if len(data) == 1:
        return fmt(data[0])
    return f"{fmt(statistics.median(data))} ({fmt(data[0])}-{fmt(data[-1])})"


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile (the sample itself, never an interpolation); 0 for no sample."""
    if not values:
        return 0.0
    data = sorted(values)
    return data[max(0, min(len(data), math.ceil(pct / 100 * len(data))) - 1)]


def rate(value: float) -> str:
    return f"{value:,.0f}".replace(",", " ")


def ratio(value: float) -> str:
    return f"{value:.2f}x"


def fixed(digits: int) -> Callable[[float], str]:
    return lambda value: f"{value:.{digits}f}"


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """A markdown table: the ``header`` line, its rule, then a line per row of cells."""
    return [table_row(header), "|" + "---|" * len(header), *(table_row(cells) for cells in rows)]


def table_row(cells: Iterable[str]) -> str:
    # An empty cell is "| |", as the tables wrote it by hand.
    return "|" + "|".join(f" {cell} " if cell else " " for cell in cells) + "|"


def titled(title: str, lines: Sequence[str]) -> list[str]:
    """``lines`` under ``title``, each set apart by a blank line; nothing when there are none."""
    return ["", title, "", *lines] if lines else []


class Tailed(Protocol):
    """What a section's closing lines tell of its run."""

    databases: dict[str, str]
    seconds: dict[str, float]

    def errors(self) -> list[str]: ...


def section_tail(results: Tailed) -> list[str]:
    """The closing lines of a report section: databases skipped, errors, the section's run time."""
    skipped = [
        f"- {kind}: {where}" for kind, where in results.databases.items() if where.startswith("skipped")
    ]
    timing = ", ".join(f"{k} {v:.0f} s" for k, v in results.seconds.items())
    return [
        *titled("Skipped:", skipped),
        *titled("Errors:", [f"- {e}" for e in results.errors()]),
        "",
        f"Section run time: {timing}.",
    ]


def section_text(parts: list[str], results: Tailed) -> str:
    """A report section's text: ``parts``, then its closing lines."""
    return "\n".join([*parts, *section_tail(results)]) + "\n"


def verdict(met: bool) -> str:
    return "**met**" if met else "**missed**"


def judged(rows: list[str], quick: bool) -> list[str]:
    """Target rows as shown: on ``--quick`` sizes a verdict would mean nothing."""
    if not quick:
        return rows
    return [
        row.replace(verdict(True), "not judged (--quick)").replace(verdict(False), "not judged (--quick)")
        for row in rows
    ]


def drain_tables(intro: str, table: list[str], targets: list[str], tail: list[str]) -> str:
    """A drain section's text: its introduction, its table of runs, its target rows and its
    closing lines."""
    parts = [intro, "", *table]
    if targets:
        parts += ["", "| target | wanted | measured | verdict |", "|---|---|---|---|", *targets]
    return "\n".join([*parts, *tail]) + "\n"
