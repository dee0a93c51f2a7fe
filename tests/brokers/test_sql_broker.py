"""The SQL broker itself, on SQLite and PostgreSQL (``database_url`` is parametrised): what
its rows hold after each operation, which the shared broker suite only sees through workers."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import delete, func, insert, select, text, update
from sqlalchemy.exc import DBAPIError

from asynctask import payload
from asynctask.brokers.base import Beat, BeatReply
from asynctask.brokers.fetcher import UnitOfWork
from asynctask.brokers.sql import SqlBroker, wake
from asynctask.brokers.sql.fetch import SqlFetcher
from asynctask.brokers.sql.models import (
    CancelledTask,
    ProcessSignal,
    QueuedJob,
    StatCounter,
    WorkerProcess,
)
from asynctask.brokers.sql.transactions import MissingTables
from asynctask.db.engine import writer
from asynctask.settings import QueueSpec
from asynctask.tracking.models import Event
from asynctask.tracking.status import EventStatus
from asynctask.tracking.transitions import status
from tests.brokers.conftest import sql_settings
from tests.conftest import run_in_threads, started_threads


def job(klass: str = "Work", queue: str = "default", **fields: Any) -> payload.JobDict:
    return {"retry": True, "queue": queue, "class": klass, "args": [], "jid": payload.new_jid(), **fields}


def rows(broker: SqlBroker, *where: Any) -> list[Any]:
    with broker.engine.connect() as connection:
        return list(connection.execute(select(QueuedJob).where(*where).order_by(QueuedJob.id)))


def claim_all(fetcher: SqlFetcher, wanted: int = 100) -> list[UnitOfWork]:
    return fetcher.claim(wanted, [], [])


def classes(units: list[UnitOfWork]) -> list[str]:
    return [payload.loads(u.payload)["class"] for u in units]


def test_push_claim_and_acknowledge(sql_broker: SqlBroker) -> None:
    sql_broker.push([(job("A"), None), (job("B"), None)])
    [first, second] = rows(sql_broker)
    assert (first.state, first.locked_by, first.priority, first.attempts) == ("queued", None, 0, 0)
    assert payload.loads(first.payload)["enqueued_at"] == first.run_at
    fetcher = sql_broker.fetcher("me")
    fetcher.register()
    units = claim_all(fetcher)
    assert classes(units) == ["A", "B"]
    assert [u.ref for u in units] == [first.id, second.id]
    assert units[0].payload == first.payload.encode()
    assert [(r.locked_by, r.attempts) for r in rows(sql_broker)] == [("me", 1), ("me", 1)]
    assert claim_all(fetcher) == []
    assert fetcher.claim(1, units, []) == []
    assert rows(sql_broker) == []


def test_acknowledging_only_deletes_this_processs_claims(sql_broker: SqlBroker) -> None:
    sql_broker.push([(job(), None)])
    [unit] = claim_all(sql_broker.fetcher("me"))
    sql_broker.fetcher("other").settle([unit], [])
    assert [r.locked_by for r in rows(sql_broker)] == ["me"]


def test_lower_priority_first_then_oldest_and_a_requeued_job_keeps_its_place(sql_broker: SqlBroker) -> None:
    sql_broker.push(
        [
            (job("five", priority=5), None),
            (job("zero-a"), None),
            (job("minus", priority=-1), None),
            (job("flag", priority=True), None),
            (job("text", priority="1"), None),
            (job("zero-b", priority=0), None),
            (job("huge", priority=10**12), None),
        ]
    )
    fetcher = sql_broker.fetcher("me")
    first = fetcher.claim(2, [], [])
    assert classes(first) == ["minus", "zero-a"]
    assert fetcher.requeue(first[1:]) == 1
    assert classes(claim_all(fetcher)) == ["zero-a", "flag", "text", "zero-b", "five", "huge"]
    assert max(r.priority for r in rows(sql_broker)) == 2**31 - 1


def test_strict_queues_are_drained_in_order(make_sql_broker: Callable[..., SqlBroker]) -> None:
    broker = make_sql_broker(queues=(QueueSpec("b"), QueueSpec("a"), QueueSpec("c")))
    broker.push([(job(f"{q}{n}", queue=q), None) for n in range(2) for q in "abc"])
    fetcher = broker.fetcher("me")
    assert classes(fetcher.claim(3, [], [])) == ["b0", "b1", "a0"]
    assert classes(claim_all(fetcher)) == ["a1", "c0", "c1"]


def test_weighted_queues_are_picked_in_proportion(make_sql_broker: Callable[..., SqlBroker]) -> None:
    broker = make_sql_broker(queues=(QueueSpec("a", 3), QueueSpec("b", 1)))
    broker.push([(job("A", queue="a"), None), (job("B", queue="b"), None)])
    fetcher = broker.fetcher("me")
    picked: Counter[str] = Counter()
    for _ in range(300):
        [unit] = fetcher.claim(1, [], [])
        picked[unit.queue] += 1
        fetcher.requeue([unit])
    # Sidekiq's weighting: "a" comes first in 3 shuffles of 4.
    assert 180 < picked["a"] < 270, picked


def test_a_scheduled_job_waits_then_moves_to_its_queue(sql_broker: SqlBroker) -> None:
    item = job("Later", enqueued_at=1.0)
    at = payload.now() + 0.6
    sql_broker.push([(item, at)])
    [row] = rows(sql_broker)
    assert (row.state, row.run_at) == ("scheduled", at)
    assert "enqueued_at" not in payload.loads(row.payload)
    fetcher = sql_broker.fetcher("me")
    assert claim_all(fetcher) == []
    assert sql_broker.enqueue_due("schedule", payload.loads) == 0
    assert sql_broker.enqueue_due("retry", payload.loads) == 0
    time.sleep(0.7)
    assert sql_broker.enqueue_due("schedule", payload.loads) == 1
    [unit] = claim_all(fetcher)
    moved = payload.loads(unit.payload)
    assert moved["jid"] == item["jid"]
    assert moved["enqueued_at"] >= at


def test_due_jobs_move_in_batches_and_a_refused_one_is_dropped(sql_broker: SqlBroker) -> None:
    past = payload.now() - 10
    sql_broker.push([(job(f"J{n}"), past + 20) for n in range(250)])
    with sql_broker.engine.begin() as connection:
        connection.execute(update(QueuedJob).values(run_at=past))
    seen: list[str] = []

    def rewrite(raw: bytes) -> payload.JobDict | None:
        item = payload.loads(raw)
        seen.append(item["class"])
        return None if item["class"] == "J7" else item

    assert sql_broker.enqueue_due("schedule", rewrite) == 249
    assert len(seen) == 250
    assert len(rows(sql_broker, QueuedJob.state == "queued")) == 249
    assert rows(sql_broker, QueuedJob.state != "queued") == []


def test_two_pollers_never_move_one_job_twice(make_sql_broker: Callable[..., SqlBroker]) -> None:
    pollers = [make_sql_broker(), make_sql_broker()]
    pollers[0].push([(job(f"J{n}"), payload.now() + 0.3) for n in range(300)])
    time.sleep(0.4)
    moved = [0, 0]
    rewritten: list[str] = []

    def poll(index: int) -> None:
        def rewrite(raw: bytes) -> payload.JobDict:
            # Slow enough that the two passes overlap.
            time.sleep(0.001)
            item = payload.loads(raw)
            rewritten.append(item["class"])
            return item

        moved[index] = pollers[index].enqueue_due("schedule", rewrite)

    threads = [threading.Thread(target=poll, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sum(moved) == 300
    assert len(rows(pollers[0], QueuedJob.state == "queued")) == 300
    assert len(rewritten) >= 300


def test_retry_at_then_the_retry_poll(sql_broker: SqlBroker) -> None:
    sql_broker.push([(job("Flaky"), None)])
    fetcher = sql_broker.fetcher("me")
    [unit] = claim_all(fetcher)
    failed = payload.loads(unit.payload) | {
        "error_class": "ValueError",
        "error_message": "boom",
        "retry_count": 0,
        "queue": "later",
    }
    sql_broker.retry_at(unit, failed, payload.now() - 1)
    [row] = rows(sql_broker)
    assert (row.id, row.state, row.queue, row.locked_by, row.last_error) == (
        unit.ref,
        "retry",
        "later",
        None,
        "ValueError: boom",
    )
    assert payload.loads(row.payload)["retry_count"] == 0
    assert sql_broker.enqueue_due("retry", payload.loads) == 1
    [row] = rows(sql_broker)
    assert (row.state, row.queue, row.locked_by) == ("queued", "later", None)


def test_kill_keeps_the_newest_dead_jobs_within_the_limits(make_sql_broker: Callable[..., SqlBroker]) -> None:
    broker = make_sql_broker(dead_max_jobs=3, dead_timeout=3600)
    with broker.engine.begin() as connection:
        connection.execute(
            insert(QueuedJob).values(
                jid="old",
                queue="default",
                state="dead",
                priority=0,
                run_at=payload.now() - 7200,
                payload="{}",
            )
        )
    broker.push([(job("Claimed"), None)])
    [unit] = claim_all(broker.fetcher("me"))
    broker.kill(unit, payload.dumps(payload.loads(unit.payload) | {"error_class": "E", "error_message": "m"}))
    [row] = rows(broker)
    assert (row.id, row.state, row.locked_by, row.last_error) == (unit.ref, "dead", None, "E: m")
    for n in range(4):
        broker.kill(None, payload.dumps(job(f"Dead{n}")))
    broker.kill_unparseable(None, b"\xff not json", "q", "unreadable")
    dead = rows(broker, QueuedJob.state == "dead")
    assert [payload.loads(r.payload)["class"] for r in dead] == [
        "Dead2",
        "Dead3",
        "AsyncTask::UnparseableJob",
    ]
    assert dead[-1].queue == "q"


def test_release_deletes_the_claimed_row(sql_broker: SqlBroker) -> None:
    sql_broker.push([(job(), None), (job(), None)])
    units = claim_all(sql_broker.fetcher("me"))
    sql_broker.release(units[0])
    assert [r.id for r in rows(sql_broker)] == [units[1].ref]


def test_requeue_all_gives_back_every_claim_of_this_process_only(sql_broker: SqlBroker) -> None:
    sql_broker.push([(job(f"J{n}"), None) for n in range(5)])
    mine, other = sql_broker.fetcher("me"), sql_broker.fetcher("other")
    assert len(mine.claim(3, [], [])) == 3
    assert len(claim_all(other)) == 2
    assert mine.requeue_all(forget=False) == 3
    assert Counter(r.locked_by for r in rows(sql_broker)) == Counter({None: 3, "other": 2})
    assert classes(claim_all(mine)) == ["J0", "J1", "J2"]


def test_recovery_takes_back_the_claims_of_dead_processes_only(
    sql_broker: SqlBroker, caplog: pytest.LogCaptureFixture
) -> None:
    sql_broker.push([(job(queue=q), None) for q in ("default", "default", "default")])
    live, dead = sql_broker.fetcher("live"), sql_broker.fetcher("dead")
    live.register()
    dead.register()
    live.claim(1, [], [])
    dead.claim(1, [], [])
    ghost = sql_broker.fetcher("never-registered")
    ghost.claim(1, [], [])
    # No orphan yet: "dead" is still within its time to live.
    assert sql_broker.recover_orphans("live") == 1
    assert Counter(r.locked_by for r in rows(sql_broker)) == Counter({"live": 1, "dead": 1, None: 1})
    with sql_broker.engine.begin() as connection:
        connection.execute(
            update(WorkerProcess).where(WorkerProcess.identity == "dead").values(expires_at=payload.now() - 1)
        )
        connection.execute(insert(ProcessSignal).values(identity="dead", signal="TSTP"))
    with caplog.at_level(logging.WARNING, logger="asynctask.recovery"):
        assert sql_broker.recover_orphans("live") == 1
    assert "recovered 1 in-flight job(s) of dead process dead to queue default" in caplog.text
    assert Counter(r.locked_by for r in rows(sql_broker)) == Counter({"live": 1, None: 2})
    with sql_broker.engine.connect() as connection:
        assert connection.scalars(select(WorkerProcess.identity)).all() == ["live"]
        assert connection.scalar(select(func.count()).select_from(ProcessSignal)) == 0
    assert sql_broker.process_count() == 1


def test_heartbeat_stats_and_signals(sql_broker: SqlBroker) -> None:
    work = {"t1": '{"queue":"default"}'}

    def beat(processed: int, failed: int, busy: int = 0) -> str | None:
        reply = sql_broker.beat(Beat("w1", '{"hostname":"h"}', busy, False, 1234, processed, failed, work))
        return reply.signal

    assert sql_broker.beat(Beat("w1", '{"hostname":"h"}', 1, False, 1234, 3, 1, work)) == BeatReply(
        None, False
    )
    assert sql_broker.beat(Beat("w1", '{"hostname":"h"}', 1, False, 1234, 0, 0, work)) == BeatReply(
        None, True
    )
    with sql_broker.engine.begin() as connection:
        connection.execute(insert(ProcessSignal), [{"identity": "w1", "signal": s} for s in ("TSTP", "TERM")])
        connection.execute(insert(ProcessSignal).values(identity="w2", signal="TTIN"))
    assert beat(2, 0) == "TSTP"
    assert beat(0, 0) == "TERM"
    assert beat(0, 0) is None
    day = time.strftime("%Y-%m-%d", time.gmtime())
    with sql_broker.engine.connect() as connection:
        stats = {
            name: value for name, value in connection.execute(select(StatCounter.name, StatCounter.value))
        }
        process = connection.execute(select(WorkerProcess)).one()
    assert stats == {"processed": 5, f"processed:{day}": 5, "failed": 1, f"failed:{day}": 1}
    assert (process.info, process.rss, process.quiet, process.work) == (
        '{"hostname":"h"}',
        1234,
        False,
        '{"t1":"{\\"queue\\":\\"default\\"}"}',
    )
    assert 0 < process.expires_at - time.time() <= 3
    assert process.rtt_us > 0
    assert sql_broker.process_count() == 1
    sql_broker.clear_process("w1", 1, 1)
    assert sql_broker.process_count() == 0
    with sql_broker.engine.connect() as connection:
        assert connection.scalar(select(StatCounter.value).where(StatCounter.name == "processed")) == 6
        assert connection.scalars(select(ProcessSignal.identity)).all() == ["w2"]


def test_cancelling_changes_the_generation_claims_report(sql_broker: SqlBroker) -> None:
    fetcher = sql_broker.fetcher("me")
    claim_all(fetcher)
    before = fetcher.cancel_generation
    assert sql_broker.tracking.cancelled_tasks() == frozenset()
    assert sql_broker.tracking.cancel_task("t1") == sql_broker.tracking.position()
    assert sql_broker.tracking.cancel_task("t1") == sql_broker.tracking.position()
    assert sql_broker.tracking.is_cancelled("t1") and not sql_broker.tracking.is_cancelled("t2")
    assert sql_broker.tracking.cancelled_tasks() == {"t1"}
    claim_all(fetcher)
    after = fetcher.cancel_generation
    assert after != before
    sql_broker.tracking.cancel_task("t2")
    claim_all(fetcher)
    assert fetcher.cancel_generation not in (before, after)
    with sql_broker.engine.connect() as connection:
        assert connection.scalar(select(func.count()).select_from(CancelledTask)) == 2


def test_staged_jobs_appear_with_the_commit_and_vanish_with_a_rollback(sql_broker: SqlBroker) -> None:
    staging = sql_broker.staging("task")
    with writer(sql_broker.engine).begin() as connection:
        staging.write(staging.encode([job("S1"), job("S2")]), connection)
        staging.write(staging.encode([job("S3", queue="other")]), connection)
        assert rows(sql_broker) == []
    assert staging.publish() == 3
    stored = rows(sql_broker)
    assert [payload.loads(r.payload)["class"] for r in stored] == ["S1", "S2", "S3"]
    assert len({payload.loads(r.payload)["enqueued_at"] for r in stored}) == 1

    aborted = sql_broker.staging("aborted")
    with pytest.raises(RuntimeError), writer(sql_broker.engine).begin() as connection:
        aborted.write(aborted.encode([job("Gone")]), connection)
        raise RuntimeError("the task failed")
    aborted.discard()
    assert len(rows(sql_broker)) == 3


def test_a_job_over_the_size_limit_is_refused(make_sql_broker: Callable[..., SqlBroker]) -> None:
    broker = make_sql_broker(max_payload_bytes=200)
    with pytest.raises(ValueError, match="over the 200-byte limit"):
        broker.push([(job(), None), (job(args=["x" * 300]), None)])
    with pytest.raises(ValueError, match="over the 200-byte limit"):
        broker.staging("t").encode([job(args=["x" * 300])])
    assert rows(broker) == []


def test_tracking_transitions_commit_with_the_job_change(sql_broker: SqlBroker) -> None:
    item = job("Tracked")
    jid = item["jid"]
    before = sql_broker.tracking.position()
    enqueued = status(jid, EventStatus.ENQUEUE, name="Tracked", params=[])
    sql_broker.push([(item, None)], transitions=[enqueued.encode()])
    assert sql_broker.tracking.position() == before + 1

    def event() -> Any:
        with sql_broker.engine.connect() as connection:
            return connection.execute(select(Event.status, Event.seq).where(Event.job_id == jid)).one()

    assert event().status == "enqueue"
    fetcher = sql_broker.fetcher("me")
    [unit] = fetcher.claim(1, [], [status(jid, EventStatus.WORKING).encode()])
    assert event().status == "working"
    finished = status(jid, EventStatus.FINISH, "done").encode()
    assert fetcher.claim(1, [unit], [finished]) == []
    assert rows(sql_broker) == []
    assert event() == ("finish", sql_broker.tracking.position())
    assert sql_broker.tracking.position() == before + 3


def refuse_deleting(broker: SqlBroker, jid: str) -> None:
    """Make deleting the row of job ``jid`` fail: a real error inside a claim's transaction,
    after its transitions were applied."""
    with broker.engine.begin() as connection:
        if connection.dialect.name == "sqlite":
            connection.exec_driver_sql(
                f"CREATE TRIGGER refuse BEFORE DELETE ON asynctask_job WHEN old.jid = '{jid}' "
                "BEGIN SELECT RAISE(ABORT, 'refused'); END"
            )
            return
        connection.exec_driver_sql(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql "
            "AS $$ BEGIN RAISE EXCEPTION 'refused'; END $$"
        )
        connection.exec_driver_sql(
            "CREATE TRIGGER refuse BEFORE DELETE ON asynctask_job FOR EACH ROW "
            f"WHEN (old.jid = '{jid}') EXECUTE FUNCTION refuse()"
        )


def test_a_failed_acknowledgement_rolls_its_transitions_back(sql_broker: SqlBroker) -> None:
    item = job("Tracked")
    sql_broker.push([(item, None)], transitions=[status(item["jid"], EventStatus.ENQUEUE, name="T").encode()])
    position = sql_broker.tracking.position()
    fetcher = sql_broker.fetcher("me")
    [unit] = claim_all(fetcher)
    refuse_deleting(sql_broker, item["jid"])
    with pytest.raises(DBAPIError, match="refused"):
        fetcher.claim(1, [unit], [status(item["jid"], EventStatus.FINISH).encode()])
    with sql_broker.engine.connect() as connection:
        assert connection.scalar(select(Event.status).where(Event.job_id == item["jid"])) == "enqueue"
    assert [r.locked_by for r in rows(sql_broker)] == ["me"]
    if sql_broker.store.postgres:
        # A sequence number drawn by a rolled-back transaction is not given again.
        assert sql_broker.tracking.position() == position + 1
    else:
        assert sql_broker.tracking.position() == position


def test_two_fetchers_in_threads_claim_every_job_exactly_once(
    make_sql_broker: Callable[..., SqlBroker],
) -> None:
    total = 2000
    broker = make_sql_broker(concurrency=8)
    broker.push([(job(f"J{n}"), None) for n in range(total)])
    claimed: list[list[int]] = [[], []]
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def run(fetcher: SqlFetcher, into: list[int]) -> None:
        try:
            start.wait()
            ack = None
            while True:
                unit = fetcher.fetch(ack, 0)
                if unit is None:
                    return
                into.append(int(unit.ref))
                ack = unit
        except BaseException as exc:
            errors.append(exc)

    fetchers = [broker.fetcher("one"), make_sql_broker().fetcher("two")]
    threads = [
        threading.Thread(target=run, args=(fetchers[i % 2], claimed[i % 2]), daemon=True) for i in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    for fetcher in fetchers:
        fetcher.flush_acks()
    assert errors == []
    everything = claimed[0] + claimed[1]
    assert len(everything) == len(set(everything)) == total
    assert claimed[0] and claimed[1]
    assert rows(broker) == []


@pytest.mark.alone
def test_idle_fetches_wake_when_jobs_are_pushed(make_sql_broker: Callable[..., SqlBroker]) -> None:
    fetcher = make_sql_broker(fetch_timeout=5.0).fetcher("me")
    got: list[UnitOfWork | None] = []
    waiting = started_threads(lambda: got.append(fetcher.fetch(None, 0)), 3)
    time.sleep(0.3)
    # Another broker (its own engine and pool), as a client process would push.
    started = time.monotonic()
    make_sql_broker().push([(job(f"Wake{n}"), None) for n in range(3)])
    for thread in waiting:
        thread.join(5)
    # Each thread got its own job, long before the 5 s fetch timeout.
    assert time.monotonic() - started < 1.5
    assert sorted(classes([u for u in got if u is not None])) == ["Wake0", "Wake1", "Wake2"]


def test_a_claim_made_after_the_listening_connection_broke_hands_out_its_jobs(
    sql_broker: SqlBroker, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The claim commits before the pending notifications are read off: a broken listening
    connection (a server restart, a cut) must not turn the committed claim into an error."""
    if not sql_broker.store.postgres:
        pytest.skip("SQLite polls; only PostgreSQL listens")
    monkeypatch.setattr(wake, "DRAIN_INTERVAL", 0.0)
    fetcher = sql_broker.fetcher("me")
    listener = fetcher._wake
    assert isinstance(listener, wake.PgListener)
    assert claim_all(fetcher) == []
    assert listener._connection is not None
    with sql_broker.engine.begin() as connection:
        connection.execute(
            text("SELECT pg_terminate_backend(:pid)"), {"pid": listener._connection.info.backend_pid}
        )
    with caplog.at_level(logging.WARNING, logger="asynctask.fetch"):
        # psycopg may first read the server's goodbye and report the loss at the next read.
        for n in range(3):
            sql_broker.push([(job(f"AfterTheCut{n}"), None)])
            assert classes(claim_all(fetcher)) == [f"AfterTheCut{n}"]
    assert any("listening for new jobs broke" in r.getMessage() for r in caplog.records)
    # The next claim listens again, on a new connection.
    assert claim_all(fetcher) == []
    assert listener._connection is not None and not listener._connection.closed


@pytest.mark.alone
def test_idle_threads_leave_the_polling_to_the_one_watching(
    make_sql_broker: Callable[..., SqlBroker], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ten idle threads with a 0.5 s fetch timeout: once they are all waiting, the database
    sees a few claims per timeout, not one per thread per timeout (40 in the 2 s counted)."""
    fetcher = make_sql_broker(fetch_timeout=0.5).fetcher("me")
    claims: list[float] = []
    claim_now = fetcher._claim_now

    def counted(wanted: int, acks: list[UnitOfWork], transitions: list[str]) -> list[UnitOfWork]:
        claims.append(time.monotonic())
        return claim_now(wanted, acks, transitions)

    monkeypatch.setattr(fetcher, "_claim_now", counted)
    # The first claims, each thread's before one of them watches, are not counted.
    counted_from = time.monotonic() + 0.5
    stop = counted_from + 2.0

    def idle() -> None:
        while time.monotonic() < stop:
            assert fetcher.fetch(None, 0) is None

    run_in_threads(idle, 10, 5)
    counted_claims = [at for at in claims if counted_from <= at < stop]
    assert 2 <= len(counted_claims) <= 20, len(counted_claims)


@pytest.mark.alone
def test_an_idle_claim_on_sqlite_does_not_wait_for_the_write_lock(sql_broker: SqlBroker) -> None:
    if sql_broker.store.postgres:
        pytest.skip("PostgreSQL has no file lock; its claims skip locked rows")
    fetcher = sql_broker.fetcher("me")
    blocker = sqlite3.connect(str(sql_broker.engine.url.database), isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        assert claim_all(fetcher) == []
        # A claim that took the lock would wait for it (SQLite's busy timeout is 30 s).
        assert time.monotonic() - started < 1
    finally:
        blocker.rollback()
        blocker.close()


def test_an_unmigrated_database_names_the_command_to_run(database_url: str) -> None:
    broker = SqlBroker(sql_settings(database_url))
    try:
        broker.ping()
        with pytest.raises(MissingTables, match="run `asynctask db upgrade`"):
            broker.push([(job(), None)])
        with pytest.raises(MissingTables, match="has no AsyncTask tables"):
            broker.fetcher("me").claim(1, [], [])
    finally:
        broker.close()


def test_deleting_a_claimed_row_does_not_recycle_its_id(sql_broker: SqlBroker) -> None:
    sql_broker.push([(job(), None)])
    [unit] = claim_all(sql_broker.fetcher("me"))
    with sql_broker.engine.begin() as connection:
        connection.execute(delete(QueuedJob))
    sql_broker.push([(job(), None)])
    [row] = rows(sql_broker)
    assert row.id > int(unit.ref)


def test_an_acknowledgement_reads_its_rows_by_id_however_many_the_process_ran(sql_broker: SqlBroker) -> None:
    """A row a process claimed stays in the index of claimed rows after its acknowledgement,
    until a vacuum: an acknowledgement that looked its rows up by claimer as well as by id
    would read all of them, slower with every job the process ran."""
    if not sql_broker.store.sql.postgres:
        pytest.skip("SQLite removes an index entry with its row, and seeks (claimer, row id) in it")
    sql_broker.push([(job(), None) for _ in range(2000)])
    fetcher = sql_broker.fetcher("me")
    units = fetcher.claim(100, [], [])
    while units:
        units = fetcher.claim(100, units, [])
    sql_broker.push([(job(), None) for _ in range(10)])
    held = claim_all(fetcher)
    sql = sql_broker.store.sql
    ids = sql.ids([u.ref for u in held])
    params = {"ids": ids, "me": "me", "now": 0.0, "wanted": 10, "queues": ["default"]}
    keyed_claim = sql.keyed_claim((False,), 10)
    assert keyed_claim is not None
    acknowledging = [sql.ack, sql.unlock, sql.claim((False,), 10), sql.claim((True,), 10), keyed_claim]
    with sql_broker.engine.begin() as connection:
        for statement in acknowledging:
            plan = "\n".join(connection.execute(text(f"EXPLAIN {statement.text}"), params).scalars())
            assert "ix_asynctask_job_claimed" not in plan, plan


def test_a_claim_is_planned_once_per_connection(sql_broker: SqlBroker) -> None:
    """Planning a claim costs more than running it: a connection prepares each claim statement
    at its first run and runs its generic plan from then on."""
    if not sql_broker.store.sql.postgres:
        pytest.skip("SQLite plans each statement once in its own statement cache")
    sql_broker.push([(job(), None) for _ in range(30)])
    fetcher = sql_broker.fetcher("me")
    units: list[UnitOfWork] = []
    for _ in range(8):
        units = fetcher.claim(2, units, [])
        assert len(units) == 2
    # One thread claimed one after the other: the pool's one connection ran every claim.
    assert generic_runs_only(sql_broker, "WITH acked%") == 8


def generic_runs_only(broker: SqlBroker, statements: str) -> int:
    """How many runs of the prepared statements LIKE ``statements``, on the connection the pool
    hands out next, used their generic plan; none may have used a custom one."""
    with broker.store.read() as connection:
        plans = connection.execute(
            text("SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE :s"),
            {"s": statements},
        ).all()
    assert all(custom == 0 for _, custom in plans), plans
    return sum(generic for generic, _ in plans)
