"""The scheduler: a thread of every worker process that enqueues the ticks of its schedules.

Every worker that loaded schedules runs one; there is no leader. Each pass reads the
schedules' last ticks from the broker, builds the job of every tick due since, and takes
them in one atomic step per pass (``PeriodicStore.take``): a tick is pushed by whichever
worker moves the schedule's last tick past it first, so each is enqueued once while any
worker lives. Of the workers passing in one second of the clock, only the first builds and
takes (``PeriodicStore.lease``), so that the others spend nothing on jobs they would lose;
if its pass fails, the ticks are still due at the next second's. A pass for a tick starts
``LEAD`` seconds before it: the lease, the schedules' states and the jobs are ready when the
tick comes, and the take waits for it as late as its broker allows (PostgreSQL runs the whole
transaction ahead and commits at the tick; Redis and SQLite take then). The thread sleeps
until the next tick of its schedules, and at most ``poll`` seconds, so a pause, a resume or
another worker's take is seen within that.

Ticks missed while every worker was down (due before this scheduler started, when no other
scheduler had passed in the last ``SCHEDULER_STALE`` seconds) follow each schedule's
``catch_up``; any other tick due is enqueued, up to ``max_catch_up`` seconds back.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

from asynctask import payload
from asynctask.brokers.periodic import Declaration, PeriodicStore, Tick
from asynctask.client import Template, template, through
from asynctask.middleware import Chain
from asynctask.periodic.schedule import Schedule, Schedules, TickCursor
from asynctask.registry import Registry
from asynctask.settings import Settings
from asynctask.supervision import Activity, Loop

logger = logging.getLogger("asynctask.periodic")

#: Seconds between two declarations of a process's schedules (they keep them from being
#: forgotten, see ``brokers.periodic.FORGET_AFTER``).
DECLARE_EVERY = 10.0

#: Seconds before a tick at which its pass starts. For 1,000 schedules on PostgreSQL, reading
#: their states and building their jobs took up to 90 ms and the take's statements about 100
#: (bench/periodic): done after the tick, they delayed every job by as much.
LEAD = 0.4

#: The most seconds a scheduler's pass starts after the others' (a random part of it).
WAKE_SPREAD = 0.02

#: The payload keys that name the schedule and the tick a periodic job was enqueued for.
SCHEDULE_FIELD = "periodic"
TICK_FIELD = "periodic_at"


@dataclass(eq=False)
class Scheduler(Loop):
    thread_name: ClassVar[str] = "asynctask-periodic"
    store: PeriodicStore
    schedules: Schedules
    registry: Registry
    client_chain: Chain[payload.JobDict]
    identity: str
    poll: float = 1.0
    max_payload_bytes: int = Settings.max_payload_bytes
    #: The broker's time (``brokers.clock``): ticks are due by it, not by this machine's.
    clock: Callable[[], float] = time.time
    _declare_at: float = field(default=0.0, init=False)
    #: The time the last pass was for (its tick, when it started ahead of one).
    _passed: float = field(default=0.0, init=False)
    #: Whether another scheduler was alive when this one started: read before the first pass.
    _others_alive: bool | None = field(default=None, init=False)
    #: When this scheduler first declared its schedules: ticks after it are its own to take.
    _started_at: float | None = field(default=None, init=False)
    #: Each schedule's job, normalized once (None: it cannot be built; logged once).
    _templates: dict[str, Template | None] = field(default_factory=dict, init=False)
    #: The ticks of each (cron, zone) after the last one seen (the pause's and the pass's start).
    _cursors: dict[tuple[str, str], TickCursor] = field(default_factory=dict, init=False)

    def start(self) -> None:
        if len(self.schedules):
            self.thread.start()

    def stop(self) -> None:
        """Stop passing, and say so in the broker (best effort: a scheduler that cannot reach
        it counts as gone ``SCHEDULER_STALE`` seconds after its last pass anyway)."""
        started = self.thread.is_alive()
        super().stop()
        if started:
            try:
                self.store.leave(self.identity)
            except self.store.errors as exc:
                logger.warning("could not record the periodic scheduler's leave: %s", exc)

    def run(self) -> None:
        activity = Activity("periodic scheduling", logger, self.store.errors)
        while not self._stopped.is_set():
            pause = activity.attempt(self.step)
            self._stopped.wait(activity.pause() if pause is None else pause)

    def step(self) -> float:
        """One pass; returns the seconds to wait before the next."""
        now = self.clock()
        if self._started_at is None:
            self.declare(now)
        upcoming = self._upcoming(now)
        due_at = upcoming if upcoming - now <= LEAD else now
        self._passed = due_at
        if self.store.lease(self.identity, int(due_at)):
            # The store waits for the tick as late as it can: PostgreSQL, at the commit.
            def until_due() -> bool:
                return not self._stopped.wait(max(0.0, due_at - self.clock()))

            self.store.take(self.prepare(due_at), self.identity, due_at, until_due)
            if self._stopped.is_set():
                return 0.0
        # After the take, so that the ticks do not wait for it.
        if now >= self._declare_at:
            self.declare(self.clock())
        return self.pause(self.clock())

    def declare(self, now: float) -> None:
        # Once per expression and zone: a reverse cron walk costs about 50 µs, and 1,000
        # schedules every second share one.
        latest: dict[tuple[str, str], int] = {}
        declarations = []
        for s in self.schedules:
            key = (s.cron, s.tz)
            if key not in latest:
                latest[key] = s.latest_tick(now)
            queue = s.queue or self._queue_of(s)
            declarations.append(Declaration(s.name, s.job, s.cron, s.tz, queue, s.catch_up, latest[key]))
        self.store.declare(declarations, self.identity, now)
        self._declare_at = now + DECLARE_EVERY
        if self._started_at is None:
            self._started_at = now

    def take(self, now: float) -> list[str]:
        """Take every tick due; returns the jids this process pushed."""
        return self.store.take(self.prepare(now), self.identity, now)

    def prepare(self, now: float) -> list[Tick]:
        """The ticks due at ``now``, each with its job built. ``now`` may be a moment away (a pass
        ahead of its tick): it is the jobs' ``created_at``, never before their tick."""
        if self._others_alive is None:
            self._others_alive = self.store.others_alive(self.identity, now)
        schedules = list(self.schedules)
        states = self.store.states([s.name for s in schedules])
        started = now if self._started_at is None else self._started_at
        ticks: list[Tick] = []
        # Schedules of one expression and zone, usually at the same last tick, share their due ticks.
        computed: dict[tuple[str, str, int], list[int]] = {}
        for schedule in schedules:
            state = states.get(schedule.name)
            if state is None or state.last is None:
                continue
            since = schedule.since(state.last, now)
            key = (schedule.cron, schedule.tz, since)
            due = computed.get(key)
            if due is None:
                due = computed[key] = self._cursor(schedule).due(since, now)
            if not due:
                continue
            before = [t for t in due if t <= started]
            chosen = schedule.to_enqueue(before, missed=not self._others_alive) + due[len(before) :]
            for at in chosen:
                ticks.append(self._tick(schedule, at, now))
            if not chosen or chosen[-1] != due[-1]:
                # Moves the schedule past the ticks it skips.
                ticks.append(Tick(schedule.name, due[-1], None))
        return ticks

    def pause(self, now: float) -> float:
        """Until ``LEAD`` before the next tick of any schedule, ``poll`` at most, plus a few random
        milliseconds: of the processes waking for it, the later ones usually find the second
        leased already and build no job for it."""
        # The tick after the last pass's: a pass that lost the lease ahead of its tick must not
        # wake again for that same tick.
        until = self._upcoming(max(now, self._passed)) - LEAD - now
        return max(0.0, min(self.poll, until + random.uniform(0.001, WAKE_SPREAD)))

    def _upcoming(self, now: float) -> float:
        """The next tick of any schedule after ``now`` (``now + poll`` past the last)."""
        cursors = {(s.cron, s.tz): self._cursor(s) for s in self.schedules}
        return min((cursor.upcoming(now) for cursor in cursors.values()), default=now + self.poll)

    def _cursor(self, schedule: Schedule) -> TickCursor:
        key = (schedule.cron, schedule.tz)
        cursor = self._cursors.get(key)
        if cursor is None:
            cursor = self._cursors[key] = TickCursor(schedule)
        return cursor

    def _tick(self, schedule: Schedule, at: int, now: float) -> Tick:
        try:
            built = self._template(schedule)
            passed = None if built is None else through(built, self._copy(built, at, now), self.client_chain)
            if passed is None:
                return Tick(schedule.name, at, None)
            job, transitions = passed
            # Stamped and encoded ahead of the take, as the whole pass is: the job is enqueued
            # when its tick comes (``now``), a moment later.
            job["enqueued_at"] = now
            encoded = payload.dumps_within(job, self.max_payload_bytes)
        except Exception:
            # The tick passes without a job: holding it would fail every pass the same way.
            logger.exception(
                "periodic %s: the job of the tick at %d cannot be built; skipped", schedule.name, at
            )
            return Tick(schedule.name, at, None)
        return Tick(schedule.name, at, job, encoded, transitions)

    def _template(self, schedule: Schedule) -> Template | None:
        if schedule.name not in self._templates:
            item: payload.JobDict = {
                "class": schedule.job,
                "args": list(schedule.args),
                SCHEDULE_FIELD: schedule.name,
            }
            if schedule.queue is not None:
                item["queue"] = schedule.queue
            try:
                self._templates[schedule.name] = template(item, self.registry)
            except (TypeError, ValueError) as exc:
                logger.error(
                    "periodic %s: its job cannot be built, its ticks pass without one: %s", schedule.name, exc
                )
                self._templates[schedule.name] = None
        return self._templates[schedule.name]

    @staticmethod
    def _copy(built: Template, at: int, now: float) -> payload.JobDict:
        return {**built.job, "jid": payload.new_jid(), "created_at": now, TICK_FIELD: at}

    def _queue_of(self, schedule: Schedule) -> str:
        if schedule.job in self.registry:
            return self.registry.get(schedule.job).options.queue
        return "default"
