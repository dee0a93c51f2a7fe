"""PeriodicSet: the periodic schedules the workers declared, with their next and last runs."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from cronsim import CronSimError

from asynctask.api.reader import Reader
from asynctask.brokers.periodic import ScheduleRecord
from asynctask.periodic.schedule import Schedule


@dataclass(frozen=True, slots=True)
class PeriodicEntry:
    """A schedule as the broker holds it, and when its next tick is (None if its cron or time
    zone cannot be read here, or it has none within a year)."""

    record: ScheduleRecord
    next_run: float | None

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def paused(self) -> bool:
        return self.record.paused


class PeriodicSet(Reader):
    """The schedules in the broker, by name; pause and resume one by name (every worker sees it
    at its next tick: a paused schedule's ticks pass without a job)."""

    def __iter__(self) -> Iterator[PeriodicEntry]:
        return iter(self.entries())

    def entries(self) -> list[PeriodicEntry]:
        now = time.time()
        return [PeriodicEntry(record, _next_run(record, now)) for record in self.backend.periodic.records()]

    def get(self, name: str) -> PeriodicEntry | None:
        return next((entry for entry in self.entries() if entry.name == name), None)

    @property
    def size(self) -> int:
        return len(self.backend.periodic.records())

    def pause(self, name: str) -> bool:
        """Pause the schedule ``name``; False if the broker does not know it."""
        return self.backend.periodic.set_paused(name, True)

    def resume(self, name: str) -> bool:
        """Resume the schedule ``name``; False if the broker does not know it."""
        return self.backend.periodic.set_paused(name, False)


def _next_run(record: ScheduleRecord, now: float) -> float | None:
    try:
        schedule = Schedule(record.name, record.job, record.cron, tz=record.tz)
    except ValueError:
        return None
    after = max(now, record.last or 0)
    try:
        tick = schedule.next_tick(after)
    except (CronSimError, StopIteration):
        return None
    return float(tick) if tick - now < 366 * 86400 else None
