"""The overview's chart of processed and failed jobs per day, drawn as SVG on the server: no
script and no inline style, so it renders under the page's Content-Security-Policy."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from asynctask.api import History

WIDTH = 720
HEIGHT = 160


@dataclass(frozen=True, slots=True)
class Bar:
    day: date
    processed: int
    failed: int
    x: float
    width: float
    #: Heights in the SVG's coordinates, scaled to the chart's peak.
    processed_height: float
    failed_height: float


@dataclass(frozen=True, slots=True)
class Chart:
    width: int
    height: int
    bars: tuple[Bar, ...]
    #: The largest daily count, processed or failed: the top of the scale.
    peak: int


def daily_chart(history: History) -> Chart:
    days = sorted(history.processed)
    peak = max([history.processed[day] for day in days] + [history.failed[day] for day in days] + [1])
    slot = WIDTH / max(len(days), 1)
    bars = tuple(
        Bar(
            day=day,
            processed=history.processed[day],
            failed=history.failed[day],
            x=index * slot + 1,
            width=max(slot - 2, 1),
            processed_height=HEIGHT * history.processed[day] / peak,
            failed_height=HEIGHT * history.failed[day] / peak,
        )
        for index, day in enumerate(days)
    )
    return Chart(WIDTH, HEIGHT, bars, peak)
