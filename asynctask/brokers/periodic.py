"""What a broker stores of periodic schedules, and the one atomic step that enqueues a tick.

Each schedule is kept in the broker under its name, with the last tick it took (``last``):
a tick is enqueued by the step that moves ``last`` forward past it, in the same script (Redis)
or transaction (SQL) as the push. Two workers that both find a tick due race for it, and the
loser finds ``last`` already there: each tick is enqueued once, whoever runs it, and whatever
worker dies at any moment (the step is all or nothing). ``last`` never moves back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from asynctask import payload

#: Seconds after its last declaration that a schedule no live worker declares any more is
#: forgotten (it was removed from the code, or its workers are gone).
FORGET_AFTER = 60.0

#: Seconds after its last pass that a scheduler counts as gone; one that stopped cleanly
#: leaves at once.
SCHEDULER_STALE = 10.0


@dataclass(frozen=True, slots=True)
class ScheduleFields:
    """What a schedule is, as workers declare it and the broker holds it."""

    name: str
    job: str
    cron: str
    tz: str
    queue: str
    catch_up: str


@dataclass(frozen=True, slots=True)
class Declaration(ScheduleFields):
    """A schedule as a worker declares it to the broker (what operators see of it)."""

    #: The tick ``last`` starts at if the broker does not know the schedule yet: the latest
    #: before now, so that a new schedule's first job is at its next tick.
    first_last: int


#: A take calls it once, when its jobs are ready to be made visible and before they are: a pass
#: ahead of its tick waits for the tick there. False abandons the take (nothing is taken).
Hold = Callable[[], bool]


def ready() -> bool:
    """The hold of a take that need not wait."""
    return True


@dataclass(frozen=True, slots=True)
class Tick:
    """A tick to take: ``job`` enqueued (None: skipped, ``last`` moved past it only) as
    ``encoded``, its payload built ahead of the take (with its ``enqueued_at``), with the
    tracking ``transitions`` its client middleware collected, written only if it is pushed."""

    name: str
    at: int
    job: payload.JobDict | None
    encoded: str = ""
    transitions: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ScheduleState:
    last: int | None
    paused: bool


@dataclass(frozen=True, slots=True)
class ScheduleRecord(ScheduleFields):
    """A schedule as the broker holds it."""

    declared_at: float
    last: int | None
    last_jid: str | None
    last_enqueued_at: float | None
    paused: bool


class PeriodicStore(Protocol):
    @property
    def errors(self) -> tuple[type[BaseException], ...]: ...

    def declare(self, declarations: Sequence[Declaration], identity: str, now: float) -> None:
        """Record the schedules a scheduler runs (new ones start at ``first_last``) and forget
        those nobody declared for ``FORGET_AFTER`` seconds."""

    def states(self, names: Sequence[str]) -> dict[str, ScheduleState]:
        """Each known schedule's ``last`` and whether it is paused."""

    def lease(self, identity: str, second: int) -> bool:
        """Whether this scheduler is the first to pass in ``second`` of the clock (its pass then
        builds the jobs; the others skip theirs): a saving, never a guarantee, as ``take``
        alone decides which tick is pushed. Also records ``identity``'s pass."""

    def others_alive(self, identity: str, now: float) -> bool:
        """Whether a scheduler other than ``identity`` made a pass in ``SCHEDULER_STALE`` s."""

    def take(self, ticks: Sequence[Tick], identity: str, now: float, hold: Hold = ready) -> list[str]:
        """Take the ticks, each schedule's in order, atomically each: a tick after the
        schedule's ``last`` becomes its ``last`` and, unless it is skipped or the schedule is
        paused, its job is pushed. Also records ``identity``'s pass. Returns the jids pushed.
        ``hold`` is called as late as the broker can before any job becomes visible; the work
        before it is done ahead."""

    def leave(self, identity: str) -> None:
        """The scheduler ``identity`` stops: it no longer counts as alive."""

    def records(self) -> list[ScheduleRecord]:
        """Every schedule the broker knows, by name."""

    def set_paused(self, name: str, paused: bool) -> bool:
        """Pause or resume a schedule: a paused one's ticks pass without a job. False if unknown."""
