"""What resumable jobs ask of a broker: checkpoints and stop requests by jid
(``Broker.checkpoints``), the park of a running job in the ``stopped`` set (``Broker.park``),
the read model's park of a job still waiting, and a resume from that set."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import func, select

from asynctask import Client, Settings, payload
from asynctask.api import Queue, RetrySet, ScheduledSet, Stats
from asynctask.api.sorted_sets import StoppedSet
from asynctask.brokers import open_broker
from asynctask.brokers.base import Broker
from asynctask.brokers.checkpoints import CHECKPOINT_TTL, Checkpoint
from asynctask.brokers.fetcher import UnitOfWork
from asynctask.brokers.reads import Scored, Stored
from asynctask.brokers.redis import RedisBroker
from asynctask.brokers.sql import SqlBroker
from asynctask.brokers.sql.models import Checkpoint as CheckpointRow
from asynctask.feeds import Feed, FeedState
from asynctask.flow import FlowOptions
from asynctask.tracking.outbox import Outbox
from asynctask.tracking.status import EventStatus
from asynctask.tracking.transitions import status
from tests.brokers.feeds.test_sql import checked, stage, states
from tests.brokers.test_sql_broker import claim_all
from tests.conftest import run_in_threads

#: Threads racing to flag one job's stop.
RACERS = 8
KEYED = FlowOptions(concurrency_key="device", concurrency_limit=1)
UNIQUE = FlowOptions(unique_for=3600, unique_key="report")


@pytest.fixture
def broker(settings: Settings) -> Iterator[Broker]:
    """A broker on ``settings``: every backend, where the SQL suites' ``sql_broker`` is SQL only."""
    opened = open_broker(settings)
    yield opened
    opened.close()


def stored(broker: Broker, jid: str) -> bool:
    """Whether the store keeps anything of the job's checkpoint (a row, or a hash on Redis)."""
    if isinstance(broker, SqlBroker):
        with broker.engine.connect() as connection:
            return bool(connection.scalar(select(func.count()).where(CheckpointRow.jid == jid)))
    assert isinstance(broker, RedisBroker)
    return bool(broker.redis.exists(broker.keys.checkpoint(jid)))


def claim(broker: Broker, jid: str) -> UnitOfWork:
    """The job ``jid``, claimed by a fetcher of this test (the only job waiting)."""
    unit = broker.fetcher("me").fetch(None, 0)
    assert unit is not None and payload.loads(unit.payload)["jid"] == jid
    return unit


def parked(unit: UnitOfWork) -> str:
    """The claimed job as a stopped job is stored: its payload with a field of the test's."""
    return payload.dumps(payload.loads(unit.payload) | {"parked_by": "test"})


def push(client: Client, flow: FlowOptions | None = None, **fields: object) -> str:
    jid = client.push({"class": "Work", "args": [], **fields}, flow=flow)
    assert jid is not None
    return jid


# Checkpoints.


def test_a_checkpoint_round_trips_and_the_next_replaces_it(broker: Broker) -> None:
    checkpoints = broker.checkpoints
    jid, other = payload.new_jid(), payload.new_jid()
    assert checkpoints.load(jid) == Checkpoint()
    assert checkpoints.save(jid, '{"page": 2}', 20) is False
    assert checkpoints.load(jid) == Checkpoint('{"page": 2}', 20, False)
    assert checkpoints.save(jid, '{"page": 3}', 31) is False
    assert checkpoints.load(jid) == Checkpoint('{"page": 3}', 31, False)
    assert checkpoints.load(other) == Checkpoint()


def test_a_save_reports_a_stop_request_and_leaves_it_flagged(broker: Broker) -> None:
    checkpoints = broker.checkpoints
    jid = payload.new_jid()
    assert checkpoints.request_stop(jid) is True
    assert checkpoints.save(jid, "1", 1) is True
    assert checkpoints.save(jid, "2", 2) is True
    assert checkpoints.load(jid) == Checkpoint("2", 2, True)


def test_a_second_stop_request_finds_the_first_and_neither_touches_the_cursor(broker: Broker) -> None:
    checkpoints = broker.checkpoints
    jid, fresh = payload.new_jid(), payload.new_jid()
    checkpoints.save(jid, '"c"', 5)
    assert checkpoints.request_stop(jid) is True
    assert checkpoints.request_stop(jid) is False
    assert checkpoints.load(jid) == Checkpoint('"c"', 5, True)
    # A job that never stored a cursor is flagged all the same.
    assert checkpoints.request_stop(fresh) is True
    assert checkpoints.request_stop(fresh) is False
    assert checkpoints.load(fresh) == Checkpoint(None, 0, True)


def test_of_stop_requests_racing_for_a_job_exactly_one_flags_it(broker: Broker) -> None:
    jids = [payload.new_jid() for _ in range(10)]
    for jid in jids[::2]:
        broker.checkpoints.save(jid, "0", 0)
    start = threading.Barrier(RACERS)
    flagged: list[str] = []
    lock = threading.Lock()

    def race() -> None:
        for jid in jids:
            start.wait()
            if broker.checkpoints.request_stop(jid):
                with lock:
                    flagged.append(jid)

    run_in_threads(race, RACERS, 30)
    assert sorted(flagged) == sorted(jids)
    assert all(broker.checkpoints.load(jid).cursor == "0" for jid in jids[::2])


def test_withdrawing_a_stop_keeps_the_cursor_and_drops_a_bare_request(broker: Broker) -> None:
    checkpoints = broker.checkpoints
    jid, bare = payload.new_jid(), payload.new_jid()
    checkpoints.save(jid, '"c"', 5)
    checkpoints.request_stop(jid)
    checkpoints.withdraw_stop(jid)
    assert checkpoints.load(jid) == Checkpoint('"c"', 5, False)
    assert checkpoints.save(jid, '"d"', 6) is False
    assert checkpoints.request_stop(jid) is True

    checkpoints.request_stop(bare)
    checkpoints.withdraw_stop(bare)
    assert checkpoints.load(bare) == Checkpoint()
    assert not stored(broker, bare) and stored(broker, jid)


def test_clear_forgets_the_checkpoint_and_the_stop_request(broker: Broker) -> None:
    checkpoints = broker.checkpoints
    jid = payload.new_jid()
    checkpoints.save(jid, '"c"', 5)
    checkpoints.request_stop(jid)
    checkpoints.clear(jid)
    assert checkpoints.load(jid) == Checkpoint()
    assert not stored(broker, jid)
    assert checkpoints.request_stop(jid) is True


def test_a_job_is_claimed_only_while_a_worker_holds_it(broker: Broker, client: Client) -> None:
    jid = push(client)
    assert broker.checkpoints.is_claimed(jid) is False
    unit = claim(broker, jid)
    assert broker.checkpoints.is_claimed(jid) is True
    assert broker.checkpoints.is_claimed(payload.new_jid()) is False
    broker.release(unit)
    assert broker.checkpoints.is_claimed(jid) is False


# Parks and resumes.


def test_park_moves_a_running_job_to_the_stopped_set_with_its_transitions(
    broker: Broker, client: Client, settings: Settings
) -> None:
    jid = push(client)
    unit = claim(broker, jid)
    outbox = Outbox()
    outbox.add(status(jid, EventStatus.STOPPED))
    position = broker.tracking.position()
    before = payload.now()
    broker.park(unit, parked(unit), outbox)

    [entry] = StoppedSet(settings=settings)
    assert entry.jid == jid and entry.item is not None and entry.item["parked_by"] == "test"
    assert before <= entry.score <= payload.now()
    assert broker.checkpoints.is_claimed(jid) is False
    # One transition numbered with the park (Redis starts a missing counter at its clock, in µs).
    moved = broker.tracking.position()
    assert (moved == position + 1 or (position == 0 and moved > 10**15)) and len(outbox) == 0
    # A stopped job is no queue's, no other set's work.
    snapshot = Stats(settings=settings).snapshot
    assert (snapshot.scheduled_size, snapshot.retry_size, snapshot.dead_size) == (0, 0, 0)
    # Redis keeps a queue's name once used (as Sidekiq does); SQL lists queues with jobs.
    assert not any(snapshot.queues.values()) and Queue("default", settings=settings).size == 0
    assert broker.fetcher("other").fetch(None, 0) is None


def test_park_ends_the_job_for_flow_control(broker: Broker, client: Client, settings: Settings) -> None:
    queue = Queue("default", settings=settings)
    first = push(client, KEYED)
    second = push(client, KEYED)
    assert queue.size == 1
    unit = claim(broker, first)
    broker.park(unit, parked(unit))
    assert [record.jid for record in queue] == [second]

    unique = push(client, UNIQUE)
    assert push(client, UNIQUE) == unique
    broker.release(claim(broker, second))
    unit = claim(broker, unique)
    broker.park(unit, parked(unit))
    assert push(client, UNIQUE) != unique
    assert StoppedSet(settings=settings).size == 2


def test_a_waiting_job_is_parked_from_its_queue_once(client: Client, settings: Settings) -> None:
    queue = Queue("default", settings=settings)
    first = push(client, KEYED)
    second = push(client, KEYED)
    record = queue.find_job(first)
    assert record is not None
    waiting = Stored(record.raw, record.ref)
    encoded = payload.dumps(dict(record.item or {}) | {"parked_by": "test"})
    now = payload.now()

    assert queue.context.backend.queue_park("default", waiting, encoded, now) is True
    assert queue.context.backend.queue_park("default", waiting, encoded, now) is False
    [entry] = StoppedSet(settings=settings)
    assert (entry.jid, entry.score, entry.raw) == (first, now, encoded.encode())
    # Its slot went to the next job of its key.
    assert [r.jid for r in queue] == [second]

    unique = push(client, UNIQUE)
    found = queue.find_job(unique)
    assert found is not None
    assert queue.context.backend.queue_park("default", Stored(found.raw, found.ref), found.raw.decode(), now)
    assert push(client, UNIQUE) != unique


def test_a_scheduled_or_retrying_job_is_parked_from_its_set_once(
    broker: Broker, client: Client, settings: Settings
) -> None:
    later = payload.now() + 3600
    scheduled = push(client, at=later)
    failing = push(client)
    unit = claim(broker, failing)
    broker.retry_at(unit, payload.loads(unit.payload) | {"retry_count": 0}, later)
    stopped = StoppedSet(settings=settings)
    now = payload.now()

    for jid, jobs in ((scheduled, ScheduledSet(settings=settings)), (failing, RetrySet(settings=settings))):
        entry = jobs.find_job(jid)
        assert entry is not None
        moved = entry.raw.decode()
        stale = Scored(entry.raw, entry.score + 1, entry.ref)
        assert jobs.backend.set_park(jobs.name, stale, moved, now) is False
        assert jobs.backend.set_park(jobs.name, entry.scored, moved, now) is True
        assert jobs.backend.set_park(jobs.name, entry.scored, moved, now) is False
        assert jobs.size == 0 and stopped.find_job(jid) is not None
    assert stopped.size == 2


def test_a_keyed_job_resumed_from_the_stopped_set_waits_for_its_slot_then_runs_again(
    broker: Broker, client: Client, settings: Settings
) -> None:
    queue = Queue("default", settings=settings)
    stopped = StoppedSet(settings=settings)
    first = push(client, KEYED)
    second = push(client, KEYED)
    unit = claim(broker, first)
    broker.park(unit, parked(unit))
    [entry] = stopped

    assert entry.add_to_queue() is True
    assert entry.add_to_queue() is False
    assert stopped.size == 0
    # The slot is the second job's now: the resumed one waits in the key's line.
    assert [r.jid for r in queue] == [second]
    broker.release(claim(broker, second))
    resumed = claim(broker, first)
    assert payload.loads(resumed.payload)["parked_by"] == "test"


def test_a_fed_job_parked_running_or_waiting_frees_its_feed_slot_and_a_resume_rejoins_the_front(
    broker: Broker, settings: Settings
) -> None:
    if not isinstance(broker, SqlBroker):
        pytest.skip("reads the SQL broker's rows")
    stage(broker, Feed(parallel=1), 3)
    [unit] = claim_all(broker.fetcher("me"))
    broker.park(unit, unit.payload.decode())
    assert states(broker) == [(0, "stopped"), (1, "queued"), (2, "held")]

    queue = Queue("default", settings=settings)
    [waiting] = queue
    assert queue.context.backend.queue_park(
        "default", Stored(waiting.raw, waiting.ref), waiting.raw.decode(), 1.0
    )
    assert states(broker) == [(0, "stopped"), (1, "stopped"), (2, "queued")]

    first = StoppedSet(settings=settings).find_job(str(payload.loads(unit.payload)["jid"]))
    assert first is not None and first.add_to_queue() is True
    assert states(broker) == [(0, "held"), (1, "stopped"), (2, "queued")]
    assert checked(broker) == FeedState(Feed(parallel=1), held=1, out=1)


def test_the_sql_sweep_forgets_checkpoints_not_written_for_their_time_to_live(broker: Broker) -> None:
    if not isinstance(broker, SqlBroker):
        pytest.skip("Redis expires each checkpoint's hash itself")
    broker.checkpoints.save("old", "1", 1)
    broker.checkpoints.request_stop("flag-only")
    written = payload.now()
    assert broker._checkpoints.expire(written + CHECKPOINT_TTL - 60) == 0
    assert stored(broker, "old") and stored(broker, "flag-only")
    assert broker._checkpoints.expire(written + CHECKPOINT_TTL + 60) == 2
    assert not stored(broker, "old") and not stored(broker, "flag-only")
