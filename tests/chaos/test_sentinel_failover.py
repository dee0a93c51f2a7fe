"""A drain through a Sentinel failover: the master killed mid-drain, the replica promoted.

Two workers drain 20,000 jobs while a client pushes more, one at a time, and the API answers
``/readyz``. The master is killed (-9); Sentinel promotes the replica; the killed server comes
back as the new master's replica. Workers, client and API must go on by themselves (no
restart) within ``RESUME_LIMIT`` seconds of the kill, and afterwards nothing may be left
anywhere.

What a failover may lose is what the old master acknowledged and had not yet sent to its
replica (replication is asynchronous). With ``redis_min_replicas=1`` every write waits until
the replica holds it, and every job pushed or drained must run. Without it, the jobs lost are
counted and reported; each must be one whose push was acknowledged in the last
``LOSS_WINDOW`` seconds before the kill (docs/internals/reliability.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import asynctask
from asynctask import Client, Registry, Settings, TaskView, Tracking
from asynctask.db.engine import create_database_engine
from asynctask.db.migrate import upgrade
from asynctask.middleware import Chain, TrackingClientMiddleware
from tests.chaos.accept import FirstAccept
from tests.chaos.drain import Drain, settle
from tests.chaos.redis_server import RedisUnavailable
from tests.chaos.sentinel_group import SentinelGroup, sentinel_group
from tests.chaos.state import RedisState, make_client, push_one
from tests.chaos.workers import Runs, Timing, WorkerPool
from tests.conftest import private_server
from webapi.app import create_app

#: Jobs of up to 5 ms: the 20 threads take most of ten seconds for the drain, so the failover
#: lands in its middle.
DRAIN = Drain(jobs=20_000, pause_ms=5, timing=Timing(heartbeat=1.0, ttl=5, poll=1.0), runs_between=3000)
#: Seconds from the kill within which workers, client and API work again.
RESUME_LIMIT = 10.0
#: Jobs run after the kill that show the workers went on: more than their 20 threads and
#: their claim buffers can hold.
GONE_ON = 500
#: Items of the tracked task created before the kill, and the seconds after the drain settled
#: that it may take to end.
TRACKED = 2000
TASK_LIMIT = 30.0
#: Seconds before the kill within which a lost job's push was acknowledged.
LOSS_WINDOW = 1.0


@pytest.fixture
def group() -> Iterator[SentinelGroup]:
    yield from private_server(sentinel_group, RedisUnavailable, "a private Redis Sentinel group")


@dataclass
class Pusher:
    """Pushes one job after another from its own thread; notes when each push was acknowledged."""

    settings: Settings
    acknowledged: dict[str, float] = field(default_factory=dict)
    failures: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        client = make_client(self.settings)
        try:
            while not self._stop.is_set():
                try:
                    jid = push_one(client)
                except client.broker.errors:
                    self.failures += 1
                    time.sleep(0.05)
                    continue
                self.acknowledged[jid] = time.monotonic()
                time.sleep(0.002)
        finally:
            client.close()

    def first_after(self, moment: float) -> float | None:
        return min((at for at in self.acknowledged.values() if at > moment), default=None)

    def stop(self) -> None:
        self._stop.set()


@dataclass(frozen=True)
class Failover:
    promoted_after: float
    workers_after: float
    client_after: float
    api_after: float


def _runs_went_on(runs: Runs, killed_at: float) -> float:
    """Seconds from the kill (epoch ``killed_at``) until the workers had finished ``GONE_ON``
    jobs since: more than their threads and claim buffers held, so run on the new master."""
    deadline = time.monotonic() + 60
    while (
        len(since := [run.at for run in runs.read() if run.event == "done" and run.at > killed_at]) < GONE_ON
    ):
        if time.monotonic() > deadline:
            return float("inf")
        time.sleep(0.05)
    return sorted(since)[GONE_ON - 1] - killed_at


def _drain_through_failover(
    group: SentinelGroup, pool: WorkerPool, runs: Runs, tmp: Path, replicas: int
) -> None:
    tracking_db = f"sqlite:///{tmp / 'tracking.db'}"
    upgrade(tracking_db)
    settings = Settings(
        redis_url=group.url, namespace="chaos", database_url=tracking_db, redis_min_replicas=replicas
    )
    state = RedisState(group.url, settings)
    registry = Registry()

    @asynctask.job(registry=registry, name="chaos_fed")
    def chaos_fed(chunk: list[int]) -> None: ...

    client = Client(settings, registry=registry, middleware=Chain([TrackingClientMiddleware()]))
    tracking = Tracking(client, create_database_engine(tracking_db))
    pusher = Pusher(settings)
    thread = threading.Thread(target=pusher.run, daemon=True)
    api = create_app({"settings": settings, "auth": False}).test_client()

    def api_ready() -> None:
        status = api.get("/readyz").status_code
        if status != 200:
            raise RuntimeError(f"/readyz answered {status}")

    ready: FirstAccept | None = None
    try:
        _, jids = DRAIN.start(pool, state, runs)
        task = tracking.create_task(chaos_fed, [DRAIN.pause_ms] * TRACKED)
        thread.start()
        time.sleep(1.0)
        assert api.get("/readyz").status_code == 200

        done_at_kill = runs.count_done()
        group.kill_master()
        # Noted once the server is gone (reaped): no reply of it can come later.
        killed, killed_at = time.monotonic(), time.time()
        ready = FirstAccept(api_ready).start()
        promoted = group.wait_promoted()
        if replicas:
            # Writes wait for a replica: none is left until the killed server comes back as one.
            group.rejoin()
        workers_after = _runs_went_on(runs, killed_at)
        first_push = pusher.first_after(killed)
        failover = Failover(
            promoted_after=promoted,
            workers_after=workers_after,
            client_after=float("inf") if first_push is None else first_push - killed,
            api_after=ready.wait(60) - killed_at,
        )
        assert done_at_kill < DRAIN.jobs, "the drain ended before the kill: it tested nothing"
        time.sleep(1.0)
        pusher.stop()
        thread.join(30)
        expected = [*jids, *pusher.acknowledged]
        outcome = settle(state, runs, expected, time.monotonic(), DRAIN.timing, pool)
        view = _task_end(tracking, task.id)
        done = runs.done()
        lost = [jid for jid in expected if jid not in done]
        left = state.leftovers()
        at_risk = {jid for jid, at in pusher.acknowledged.items() if killed - LOSS_WINDOW <= at <= killed}
        print(
            f"\nsentinel failover, redis_min_replicas={replicas}: promoted {failover.promoted_after:.1f} s "
            f"after the kill; workers went on after {failover.workers_after:.1f} s, the client after "
            f"{failover.client_after:.1f} s, the API after {failover.api_after:.1f} s; {len(expected)} jobs "
            f"({len(pusher.acknowledged)} pushed during the drain, {pusher.failures} pushes refused), "
            f"{len(lost)} lost, {outcome.duplicates} run twice; the tracked task of {TRACKED} items "
            f"{view.status} with {view.counts['finish']} finished"
        )
        problems = [
            f"{what} went on only after {after:.1f} s"
            for what, after in (
                ("workers", failover.workers_after),
                ("the client", failover.client_after),
                ("the API", failover.api_after),
            )
            if after > RESUME_LIMIT
        ]
        if left:
            problems.append("left in the broker:\n  " + "\n  ".join(left))
        if replicas and view.counts["finish"] != TRACKED:
            problems.append(f"the tracked task did not end with every item finished: {view.counts}")
        if replicas and lost:
            problems.append(f"{len(lost)} job(s) lost with redis_min_replicas=1: {lost[:5]}")
        if not replicas and set(lost) - at_risk:
            problems.append(f"job(s) lost that were pushed earlier than {LOSS_WINDOW} s before the kill")
        assert not problems, "\n".join(problems) + f"\n{pool.logs()}\n{group.logs()}"
    finally:
        if ready is not None:
            ready.stop()
        pusher.stop()
        thread.join(30)
        client.close()
        state.close()


def _task_end(tracking: Tracking, task_id: str) -> TaskView:
    """The task once it ended, or as it is after ``TASK_LIMIT`` seconds."""
    deadline = time.monotonic() + TASK_LIMIT
    while (view := tracking.get_task(task_id)).status not in ("finished", "finished_with_errors"):
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    return view


@pytest.mark.slow
@pytest.mark.alone
@pytest.mark.parametrize(
    "replicas",
    [1, 0],
    ids=["waiting for the replica loses nothing", "not waiting loses only the last pushes"],
)
def test_a_drain_goes_on_through_a_sentinel_failover(
    group: SentinelGroup, pool: WorkerPool, runs: Runs, tmp_path: Path, replicas: int
) -> None:
    _drain_through_failover(group, pool, runs, tmp_path, replicas)
