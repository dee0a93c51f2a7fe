"""Schedules: a registered job, a cron expression and a time zone, and the ticks they give.

A schedule's ticks are the instants its cron expression matches in its time zone, as whole
epoch seconds. Time zones follow cronsim's rules, those of Debian's cron: a wall-clock time
that a spring-forward change skips runs at the first instant after the gap, and one that a
fall-back change repeats runs once, at its first occurrence; expressions that match every
few minutes or seconds keep matching in absolute time through either change.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from asynctask import payload
from asynctask.job import JobDefinition

if TYPE_CHECKING:
    from zoneinfo import ZoneInfo

CatchUp = Literal["latest", "all", "none"]
CATCH_UP: tuple[CatchUp, ...] = ("latest", "all", "none")

#: The most ticks of one schedule a pass looks at: a schedule every second that nobody ran for a
#: day is not worth 86,400 jobs, nor their computation.
MAX_TICKS_PER_PASS = 1000

#: Schedule names are keys and CLI arguments: short, printable, no spaces.
MAX_NAME_LENGTH = 200

D = TypeVar("D", bound=JobDefinition[Any])


@dataclass(frozen=True)
class Schedule:
    """``job`` enqueued with ``args`` at each tick of ``cron`` in ``tz``.

    ``cron``: five fields (minute, hour, day of month, month, day of week), or six with a
    leading seconds field. ``queue``: None for the job's own. ``catch_up``: what a worker
    that finds ticks missed while every worker was down enqueues: the most recent one
    (``"latest"``), each of them within ``max_catch_up`` seconds (``"all"``), or none.
    """

    name: str
    job: str
    cron: str
    args: tuple[Any, ...] = ()
    tz: str = "UTC"
    queue: str | None = None
    catch_up: CatchUp = "latest"
    max_catch_up: float = 3600.0
    zone: ZoneInfo = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Imported by the first schedule: every process imports this module (the decorator is
        # ``asynctask.periodic``), few define a schedule, and the two cost 6 ms of a start.
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        from cronsim import CronSim, CronSimError

        if not isinstance(self.name, str) or not self.name or len(self.name) > MAX_NAME_LENGTH:
            raise ValueError(f"a schedule name must be 1 to {MAX_NAME_LENGTH} characters, got {self.name!r}")
        if any(c.isspace() or not c.isprintable() for c in self.name):
            raise ValueError(f"a schedule name has no spaces or control characters, got {self.name!r}")
        try:
            object.__setattr__(self, "zone", ZoneInfo(self.tz))
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"schedule {self.name!r}: unknown time zone {self.tz!r}") from exc
        try:
            CronSim(self.cron, datetime.now(self.zone))
        except CronSimError as exc:
            raise ValueError(f"schedule {self.name!r}: bad cron expression {self.cron!r}: {exc}") from None
        if self.catch_up not in CATCH_UP:
            raise ValueError(
                f"schedule {self.name!r}: catch_up must be one of {CATCH_UP}, got {self.catch_up!r}"
            )
        if not self.max_catch_up >= 0:
            raise ValueError(f"schedule {self.name!r}: max_catch_up must be >= 0 seconds")
        if self.queue is not None and (not isinstance(self.queue, str) or not self.queue):
            raise ValueError(f"schedule {self.name!r}: queue must be a non-empty string or None")
        payload.check_args(list(self.args))

    def ticks_after(self, after: float) -> Iterator[int]:
        """The ticks strictly after epoch second ``after``, in order, forever."""
        from cronsim import CronSim

        start = datetime.fromtimestamp(int(after), UTC).astimezone(self.zone)
        for moment in CronSim(self.cron, start):
            yield int(moment.timestamp())

    def next_tick(self, after: float) -> int:
        return next(self.ticks_after(after))

    def since(self, last: int, now: float) -> int:
        """Where the ticks due at ``now`` start after ``last``: ``max_catch_up`` seconds back at most."""
        return max(last, int(now - self.max_catch_up) - 1)

    def due(self, last: int | None, now: float) -> list[int]:
        """The ticks in (``last``, ``now``], oldest first, at most ``MAX_TICKS_PER_PASS`` of the
        most recent ones; ``last`` None: a schedule seen for the first time has none due."""
        return [] if last is None else TickCursor(self).due(self.since(last, now), now)

    def latest_tick(self, now: float) -> int:
        """The most recent tick at or before ``now`` (``now`` itself if the expression has none)."""
        from cronsim import CronSim

        start = datetime.fromtimestamp(int(now) + 1, UTC).astimezone(self.zone)
        for moment in CronSim(self.cron, start, reverse=True):
            return int(moment.timestamp())
        return int(now)

    def to_enqueue(self, due: Sequence[int], missed: bool) -> list[int]:
        """Which of ``due`` to enqueue. Ticks missed while every worker was down follow
        ``catch_up``; the others all run (they came due while a worker lived)."""
        if not due or not missed or self.catch_up == "all":
            return list(due)
        return [due[-1]] if self.catch_up == "latest" else []


class TickCursor:
    """The ticks of a cron expression in a zone (shared by the schedules that have both) from a
    moving point, kept between passes: in the steady state a pass costs one step of the
    expression, not a new evaluation from a schedule's last tick."""

    def __init__(self, schedule: Schedule) -> None:
        self.schedule = schedule
        #: The first tick after ``_after``, and the ticks after it.
        self._after: float | None = None
        self._next = 0
        self._rest: Iterator[int] = iter(())

    def _from(self, after: float) -> None:
        if self._after is not None and self._after <= after < self._next:
            return  # no tick in between: the first after ``after`` is still ``_next``
        self._rest = self.schedule.ticks_after(after)
        self._next = next(self._rest)
        self._after = after

    def upcoming(self, now: float) -> int:
        """The first tick after ``now``."""
        self._from(now)
        return self._next

    def due(self, since: float, now: float) -> list[int]:
        """The ticks in (``since``, ``now``], the most recent ``MAX_TICKS_PER_PASS`` of them,
        stepping on from the ticks seen before."""
        self._from(since)
        ticks: deque[int] = deque(maxlen=MAX_TICKS_PER_PASS)
        while self._next <= now:
            ticks.append(self._next)
            self._after, self._next = self._next, next(self._rest)
        return list(ticks)


class Schedules:
    """The schedules a worker runs: those declared in the modules it loaded (``-r``)."""

    def __init__(self) -> None:
        self._schedules: dict[str, Schedule] = {}

    def add(self, schedule: Schedule) -> None:
        existing = self._schedules.get(schedule.name)
        if existing is not None and existing != schedule:
            raise ValueError(f"schedule name {schedule.name!r} is already declared: {existing}")
        self._schedules[schedule.name] = schedule

    def remove(self, name: str) -> None:
        self._schedules.pop(name, None)

    def __iter__(self) -> Iterator[Schedule]:
        return iter(list(self._schedules.values()))

    def __len__(self) -> int:
        return len(self._schedules)

    def __contains__(self, name: object) -> bool:
        return name in self._schedules


#: Where ``asynctask.periodic`` declares unless told otherwise; the worker runs these.
default_schedules = Schedules()


@overload
def periodic(
    job: D,
    /,
    *,
    cron: str,
    args: Sequence[Any] = (),
    name: str | None = None,
    tz: str = "UTC",
    queue: str | None = None,
    catch_up: CatchUp = "latest",
    max_catch_up: float = 3600.0,
    schedules: Schedules | None = None,
) -> D: ...


@overload
def periodic(
    job: None = None,
    /,
    *,
    cron: str,
    args: Sequence[Any] = (),
    name: str | None = None,
    tz: str = "UTC",
    queue: str | None = None,
    catch_up: CatchUp = "latest",
    max_catch_up: float = 3600.0,
    schedules: Schedules | None = None,
) -> Callable[[D], D]: ...


def periodic(
    job: D | None = None,
    /,
    *,
    cron: str,
    args: Sequence[Any] = (),
    name: str | None = None,
    tz: str = "UTC",
    queue: str | None = None,
    catch_up: CatchUp = "latest",
    max_catch_up: float = 3600.0,
    schedules: Schedules | None = None,
) -> Any:
    """Run ``job`` at each tick of ``cron``: ``periodic(report, cron="0 3 * * *", tz="Europe/Paris")``,
    or as a decorator stacked on ``@asynctask.job``. Every worker that loaded the declaring
    module takes part in scheduling, and each tick is enqueued once (docs/guide/periodic.md).
    ``name`` defaults to the job's name; it identifies the schedule in the broker."""

    def declare(definition: D) -> D:
        if not isinstance(definition, JobDefinition):
            raise TypeError("periodic takes a job defined with @asynctask.job (stack it above @job)")
        schedule = Schedule(
            name or definition.name, definition.name, cron, tuple(args), tz, queue, catch_up, max_catch_up
        )
        definition.check_args(list(args))
        (default_schedules if schedules is None else schedules).add(schedule)
        return definition

    return declare(job) if job is not None else declare
