"""Task feeds in the SQL broker, on SQLite and PostgreSQL: the rows of a fed task through
publish, every end path, retries, pushes, tuning, cancel and the ticker (the numbered points
of the feeds contract). The shared suite (test_shared.py) checks the behaviour through
workers; these check the rows."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import delete, func, select, text, update

from asynctask import payload
from asynctask.brokers.fetcher import UnitOfWork
from asynctask.brokers.reads import Move
from asynctask.brokers.sql import SqlBroker
from asynctask.brokers.sql.feeds import acknowledged_feed
from asynctask.brokers.sql.models import FeedRow, QueuedJob
from asynctask.brokers.sql.reads import SqlReader
from asynctask.feeds import Feed, FeedChange, FeedState
from asynctask.tracking.status import EventStatus
from asynctask.tracking.transitions import status
from tests.brokers import test_sql_broker as base
from tests.brokers.test_sql_broker import claim_all
from tests.conftest import wait_until


def job(n: int, task: str = "T", **fields: Any) -> payload.JobDict:
    return base.job("Work", args=[n], task=task, feed=task, **fields)


def stage(
    broker: SqlBroker, feed: Feed, count: int, *, task: str = "T", batches: int = 1, **fields: Any
) -> list[payload.JobDict]:
    """Publish a fed task of ``count`` jobs (their args: their item numbers), as create_task
    does: written in ``batches`` through one transaction, then published."""
    jobs = [job(n, task, **fields) for n in range(count)]
    staging = broker.staging(task, feed)
    size = -(-count // batches)
    with broker.engine.begin() as connection:
        for start in range(0, count, size):
            staging.write(staging.encode(jobs[start : start + size]), connection)
    assert staging.publish() == count
    return jobs


def rows(broker: SqlBroker) -> list[Any]:
    return base.rows(broker)


def states(broker: SqlBroker) -> list[tuple[int, str]]:
    """(item number, state) of every row, by id."""
    return [(payload.loads(r.payload)["args"][0], r.state) for r in rows(broker)]


def acked_and_claimed(fetcher: Any, units: list[UnitOfWork]) -> list[UnitOfWork]:
    """Acknowledge ``units`` and claim what is released: in the same claim on SQLite, where
    the release comes before the claim; PostgreSQL's claim statement acknowledges, and the
    release after it, so its jobs are the next claim's."""
    return fetcher.claim(10, units, []) or claim_all(fetcher)


def items(units: list[UnitOfWork]) -> list[int]:
    return [json.loads(u.payload)["args"][0] for u in units]


def checked(broker: SqlBroker, task: str = "T") -> FeedState | None:
    """The feed's state, after checking its counts against the rows."""
    state = broker.feeds.state(task)
    if state is not None:
        fed = [r for r in rows(broker) if r.feed == task]
        assert state.held == sum(r.state == "held" for r in fed)
        assert state.out == sum(r.state in ("queued", "lane", "scheduled") for r in fed)
    return state


def feed_row(broker: SqlBroker, task: str = "T") -> Any:
    with broker.engine.connect() as connection:
        return connection.execute(select(FeedRow).where(FeedRow.task_id == task)).first()


def test_publish_holds_the_jobs_in_item_order_and_releases_up_to_parallel(sql_broker: SqlBroker) -> None:
    stage(sql_broker, Feed(parallel=2, priority=-1), 7, batches=3)
    assert states(sql_broker) == [(0, "queued"), (1, "queued")] + [(n, "held") for n in range(2, 7)]
    assert {r.feed for r in rows(sql_broker)} == {"T"}
    # Released rows take the feed's priority; the held ones get it when they are released.
    assert [r.priority for r in rows(sql_broker) if r.state == "queued"] == [-1, -1]
    assert checked(sql_broker) == FeedState(Feed(parallel=2, priority=-1), held=5, out=2)
    found = feed_row(sql_broker)
    assert found.last_release_at is not None and found.next_at is not None


def test_every_acknowledgement_releases_the_next_held_job_and_never_more_than_parallel(
    sql_broker: SqlBroker,
) -> None:
    stage(sql_broker, Feed(parallel=2), 6)
    fetcher = sql_broker.fetcher("me")
    fetcher.register()
    ran: list[int] = []
    units = claim_all(fetcher)
    assert items(units) == [0, 1]
    while units:
        ran += items(units[:1])
        # The ack of one job, inside the next claim: its slot goes to the next held job.
        units = units[1:] + fetcher.claim(10, units[:1], [])
        state = checked(sql_broker)
        assert state is not None and state.out <= 2
        if not units:
            units = claim_all(fetcher)
    assert ran == list(range(6))
    assert rows(sql_broker) == []
    assert checked(sql_broker) == FeedState(Feed(parallel=2), held=0, out=0)
    assert feed_row(sql_broker).next_at is None


def test_postgresql_releases_every_tenth_of_parallel_ends_and_the_tick_releases_the_rest(
    sql_broker: SqlBroker,
) -> None:
    if not sql_broker.store.postgres:
        pytest.skip("SQLite releases in the acknowledgement's own transaction, at every end")
    stage(sql_broker, Feed(parallel=20), 40)
    fetcher = sql_broker.fetcher("me")
    fetcher.register()
    units = claim_all(fetcher)
    assert len(units) == 20

    def ack(count: int) -> FeedState | None:
        nonlocal units
        fetcher.claim(0, units[:count], [])
        units = units[count:]
        return checked(sql_broker)

    # The first end teaches the process the feed's step (parallel 20: 2 ends).
    assert ack(1) == FeedState(Feed(parallel=20), held=19, out=20)
    assert ack(1) == FeedState(Feed(parallel=20), held=19, out=19)
    assert ack(1) == FeedState(Feed(parallel=20), held=17, out=20)
    assert ack(1) == FeedState(Feed(parallel=20), held=17, out=19)
    assert sql_broker.feeds.tick() == 1
    assert checked(sql_broker) == FeedState(Feed(parallel=20), held=16, out=20)
    # Releases after an acknowledgement move the cursor too (``held_in_order``), and out_from
    # to the first row out.
    assert feed_row(sql_broker).released_id == max(r.id for r in rows(sql_broker) if r.state != "held")
    assert feed_row(sql_broker).out_from == min(r.id for r in rows(sql_broker) if r.state != "held")


def test_a_release_reads_the_held_rows_after_the_last_it_released(sql_broker: SqlBroker) -> None:
    if not sql_broker.store.postgres:
        pytest.skip("SQLite removes an index entry with its row; PostgreSQL keeps it until a vacuum")
    stage(sql_broker, Feed(parallel=2_000), 4_000)
    # Staged rows share the task's enqueue time as run_at (a release sets it to now).
    staged_at = {r.run_at for r in rows(sql_broker) if r.state == "held"}.pop()
    last = max(r.id for r in rows(sql_broker) if r.state == "queued")
    assert (feed_row(sql_broker).released_run_at, feed_row(sql_broker).released_id) == (staged_at, last)
    with sql_broker.engine.begin() as connection:
        connection.execute(delete(QueuedJob).where(QueuedJob.state == "queued"))

    def pages_read(cursor: tuple[float, int]) -> int:
        """Index and table pages the next release's read of held rows touches."""
        statement = sql_broker.feeds.statements.candidates.compile(dialect=sql_broker.engine.dialect)
        params = {
            "task_id": "T",
            "parallel": 10,
            "released_run_at": cursor[0],
            "released_id": cursor[1],
            "out_from": last + 1,
        }
        with sql_broker.engine.connect() as connection:
            plan = connection.exec_driver_sql(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {statement}", params)
            return int(plan.scalar_one()[0]["Plan"]["Shared Hit Blocks"])

    # The 2,000 rows released, then acknowledged, are still in the held index until a vacuum.
    assert pages_read((0.0, 0)) > 5 * pages_read((staged_at, last))
    assert pages_read((staged_at, last)) < 20
    # A row that rejoins the front is read first whatever the cursor.
    held = [r for r in rows(sql_broker) if r.state == "held"]
    with sql_broker.engine.begin() as connection:
        connection.execute(update(QueuedJob).where(QueuedJob.id == held[-1].id).values(run_at=0))
    assert sql_broker.feeds.update("T", FeedChange(parallel=1)) == FeedState(
        Feed(parallel=1), held=1_999, out=1
    )
    assert [r.id for r in rows(sql_broker) if r.state == "queued"] == [held[-1].id]
    # Rows out are counted from the feed's out_from, which a release after an acknowledgement
    # moves to the first row out: the ended rows' entries, still in the out index, are not
    # walked again.
    assert feed_row(sql_broker).out_from < last
    assert sql_broker.feeds.release_now(["T"]) == 0
    assert feed_row(sql_broker).out_from == held[-1].id


def test_settle_releases_in_its_transaction(sql_broker: SqlBroker) -> None:
    stage(sql_broker, Feed(parallel=1), 3)
    fetcher = sql_broker.fetcher("me")
    [unit] = claim_all(fetcher)
    fetcher.settle([unit], [])
    assert states(sql_broker) == [(1, "queued"), (2, "held")]
    assert checked(sql_broker) == FeedState(Feed(parallel=1), held=1, out=1)


def test_kill_and_release_free_the_slot(sql_broker: SqlBroker) -> None:
    stage(sql_broker, Feed(parallel=1), 3)
    fetcher = sql_broker.fetcher("me")
    [unit] = claim_all(fetcher)
    sql_broker.kill(unit, unit.payload.decode())
    assert states(sql_broker) == [(0, "dead"), (1, "queued"), (2, "held")]
    [unit] = claim_all(fetcher)
    sql_broker.release(unit)
    assert states(sql_broker) == [(0, "dead"), (2, "queued")]
    assert checked(sql_broker) == FeedState(Feed(parallel=1), held=0, out=1)


def test_read_api_removals_release(sql_broker: SqlBroker) -> None:
    reader = SqlReader(sql_broker.engine, sql_broker.settings)
    stage(sql_broker, Feed(parallel=2), 6)
    head = next(
        entry for entry in reader.queue_rows("default", 10) if payload.loads(entry.raw)["args"] == [0]
    )
    assert reader.queue_delete("default", head)
    assert states(sql_broker) == [(1, "queued"), (2, "queued")] + [(n, "held") for n in range(3, 6)]
    # Held jobs are in no queue: a clear ends the released ones only, and the feed refills.
    assert reader.queue_clear("default") == 2
    assert states(sql_broker) == [(3, "queued"), (4, "queued"), (5, "held")]
    [unit, _] = claim_all(sql_broker.fetcher("me"))
    sql_broker.kill(unit, unit.payload.decode())
    [dead] = reader.set_rows("dead", 10)
    assert reader.set_delete("dead", dead)
    assert checked(sql_broker) == FeedState(Feed(parallel=2), held=0, out=2)


def test_a_retry_frees_its_slot_and_rejoins_the_front_of_the_held_jobs_when_due(
    sql_broker: SqlBroker,
) -> None:
    stage(sql_broker, Feed(parallel=1), 3)
    fetcher = sql_broker.fetcher("me")
    [unit] = claim_all(fetcher)
    sql_broker.retry_at(unit, payload.loads(unit.payload) | {"retry_count": 0}, payload.now() - 1)
    assert states(sql_broker) == [(0, "retry"), (1, "queued"), (2, "held")]
    assert checked(sql_broker) == FeedState(Feed(parallel=1), held=1, out=1)
    # Due again: held at the front, not queued (the feed has no room).
    assert sql_broker.enqueue_due("retry", payload.loads) == 1
    assert states(sql_broker) == [(0, "held"), (1, "queued"), (2, "held")]
    assert checked(sql_broker) == FeedState(Feed(parallel=1), held=2, out=1)
    [unit] = claim_all(fetcher)
    assert items([unit]) == [1]
    assert items(acked_and_claimed(fetcher, [unit])) == [0]
    assert states(sql_broker) == [(0, "queued"), (2, "held")]


def test_a_retry_due_with_room_is_released_at_once(sql_broker: SqlBroker) -> None:
    stage(sql_broker, Feed(parallel=1), 1)
    [unit] = claim_all(sql_broker.fetcher("me"))
    sql_broker.retry_at(unit, payload.loads(unit.payload) | {"retry_count": 0}, payload.now() - 1)
    assert checked(sql_broker) == FeedState(Feed(parallel=1), held=0, out=0)
    sql_broker.enqueue_due("retry", payload.loads)
    assert states(sql_broker) == [(0, "queued")]
    assert checked(sql_broker) == FeedState(Feed(parallel=1), held=0, out=1)


def test_a_retry_of_a_cancelled_feed_is_enqueued_as_usual(sql_broker: SqlBroker) -> None:
    stage(sql_broker, Feed(parallel=1), 3)
    [unit] = claim_all(sql_broker.fetcher("me"))
    sql_broker.retry_at(unit, payload.loads(unit.payload) | {"retry_count": 0}, payload.now() - 1)
    assert sql_broker.feeds.cancel("T") == 1
    assert states(sql_broker) == [(0, "retry"), (1, "queued")]
    sql_broker.enqueue_due("retry", payload.loads)
    assert states(sql_broker) == [(0, "queued"), (1, "queued")]
    assert sql_broker.feeds.state("T") is None


def test_a_dead_job_retried_by_hand_rejoins_the_front(sql_broker: SqlBroker) -> None:
    reader = SqlReader(sql_broker.engine, sql_broker.settings)
    stage(sql_broker, Feed(parallel=1), 3)
    [unit] = claim_all(sql_broker.fetcher("me"))
    sql_broker.kill(unit, unit.payload.decode())
    [dead] = reader.set_rows("dead", 10)
    assert reader.set_enqueue("dead", [Move(dead, dead.raw.decode(), "default")], payload.now()) == 1
    assert states(sql_broker) == [(0, "held"), (1, "queued"), (2, "held")]
    assert checked(sql_broker) == FeedState(Feed(parallel=1), held=2, out=1)


def test_a_push_of_a_fed_job_joins_the_front_or_is_an_ordinary_push_once_the_feed_is_gone(
    sql_broker: SqlBroker,
) -> None:
    stage(sql_broker, Feed(parallel=1), 2)
    again = job(9)
    assert sql_broker.push([(again, None)]) == [again["jid"]]
    assert states(sql_broker) == [(0, "queued"), (1, "held"), (9, "held")]
    fetcher = sql_broker.fetcher("me")
    [unit] = claim_all(fetcher)
    # The pushed job is released before the job held since the publish.
    assert items(acked_and_claimed(fetcher, [unit])) == [9]
    assert checked(sql_broker) == FeedState(Feed(parallel=1), held=1, out=1)
    sql_broker.feeds.cancel("T")
    late = job(10)
    sql_broker.push([(late, None)])
    assert [(r.jid, r.state, r.feed) for r in rows(sql_broker) if r.jid == late["jid"]] == [
        (late["jid"], "queued", None)
    ]


def test_a_push_with_room_is_released_at_once(sql_broker: SqlBroker) -> None:
    stage(sql_broker, Feed(parallel=2), 1)
    sql_broker.push([(job(5), None)])
    assert states(sql_broker) == [(0, "queued"), (5, "queued")]
    assert checked(sql_broker) == FeedState(Feed(parallel=2), held=0, out=2)


def test_a_job_given_back_or_recovered_keeps_its_slot(sql_broker: SqlBroker) -> None:
    stage(sql_broker, Feed(parallel=1), 2)
    fetcher = sql_broker.fetcher("me")
    fetcher.register()
    claim_all(fetcher)
    assert fetcher.requeue_all(forget=False) == 1
    assert states(sql_broker) == [(0, "queued"), (1, "held")]
    claim_all(sql_broker.fetcher("dead-process"))
    assert sql_broker.recover_orphans("me") == 1
    assert states(sql_broker) == [(0, "queued"), (1, "held")]
    assert checked(sql_broker) == FeedState(Feed(parallel=1), held=1, out=1)


def test_priority_orders_released_jobs_and_a_change_applies_to_those_not_started(
    sql_broker: SqlBroker,
) -> None:
    plain = base.job("Plain")
    sql_broker.push([(plain, None)])
    stage(sql_broker, Feed(parallel=3, priority=-5), 5)
    fetcher = sql_broker.fetcher("me")
    # Lower runs first: the fed jobs before the plain job pushed earlier.
    [first] = fetcher.claim(1, [], [])
    assert items([first]) == [0]
    state = sql_broker.feeds.update("T", FeedChange(priority=7))
    assert state == FeedState(Feed(parallel=3, priority=7), held=2, out=3)
    by_item = {payload.loads(r.payload)["args"][0]: r.priority for r in rows(sql_broker) if r.feed}
    # The claimed job keeps its priority; the released ones not claimed take the new one.
    assert by_item[0] == -5 and by_item[1] == by_item[2] == 7
    classes = [payload.loads(u.payload)["class"] for u in fetcher.claim(1, [first], [])]
    assert classes == ["Plain"]
    assert {r.priority for r in rows(sql_broker) if r.feed and r.state == "queued"} == {7}


def test_update_tops_up_at_once_and_a_lower_parallel_waits_for_jobs_to_end(sql_broker: SqlBroker) -> None:
    stage(sql_broker, Feed(parallel=1), 6)
    assert sql_broker.feeds.update("T", FeedChange(parallel=3)) == FeedState(Feed(parallel=3), held=3, out=3)
    fetcher = sql_broker.fetcher("me")
    units = claim_all(fetcher)
    assert sql_broker.feeds.update("T", FeedChange(parallel=1)) == FeedState(Feed(parallel=1), held=3, out=3)
    # Released jobs are not pulled back; ends release nothing until fewer than one is out.
    fetcher.settle(units[:2], [])
    assert checked(sql_broker) == FeedState(Feed(parallel=1), held=3, out=1)
    fetcher.settle(units[2:], [])
    assert checked(sql_broker) == FeedState(Feed(parallel=1), held=2, out=1)


def test_pause_stops_releases_and_resume_tops_up(sql_broker: SqlBroker) -> None:
    stage(sql_broker, Feed(parallel=2), 5)
    paused = sql_broker.feeds.update("T", FeedChange(paused=True))
    assert paused == FeedState(Feed(parallel=2, paused=True), held=3, out=2)
    fetcher = sql_broker.fetcher("me")
    fetcher.settle(claim_all(fetcher), [])
    assert checked(sql_broker) == FeedState(Feed(parallel=2, paused=True), held=3, out=0)
    assert sql_broker.feeds.tick() == 0
    assert sql_broker.feeds.update("T", FeedChange(paused=False)) == FeedState(
        Feed(parallel=2), held=1, out=2
    )


def test_an_interval_spaces_releases_and_the_ticker_releases_when_it_passes(sql_broker: SqlBroker) -> None:
    interval = 0.5
    stage(sql_broker, Feed(parallel=2, interval=interval), 5)
    released_at = feed_row(sql_broker).last_release_at
    assert checked(sql_broker) == FeedState(Feed(parallel=2, interval=interval), held=3, out=2)
    fetcher = sql_broker.fetcher("me")
    fetcher.settle(claim_all(fetcher), [])
    now = payload.now()
    if now < released_at + interval:
        # Within the interval the ends release nothing; the ticker is told when to.
        assert checked(sql_broker) == FeedState(Feed(parallel=2, interval=interval), held=3, out=0)
        assert feed_row(sql_broker).next_at == pytest.approx(released_at + interval)
        assert sql_broker.feeds.tick() == 0
    time.sleep(max(0.0, released_at + interval - payload.now()) + 0.05)
    assert sql_broker.feeds.tick() == 2
    assert checked(sql_broker) == FeedState(Feed(parallel=2, interval=interval), held=1, out=2)
    assert feed_row(sql_broker).last_release_at >= released_at + interval
    # Nothing due: nothing done.
    assert sql_broker.feeds.tick() == 0


def test_the_ticker_releases_a_feed_whose_slot_was_freed_behind_its_back(sql_broker: SqlBroker) -> None:
    stage(sql_broker, Feed(parallel=1), 2)
    with sql_broker.engine.begin() as connection:
        connection.execute(delete(QueuedJob).where(QueuedJob.state == "queued"))
    assert sql_broker.feeds.tick() == 0
    # The safety look comes later; brought forward here.
    with sql_broker.engine.begin() as connection:
        connection.execute(update(FeedRow).values(next_at=payload.now() - 1))
    assert sql_broker.feeds.tick() == 1
    assert states(sql_broker) == [(1, "queued")]


def test_cancel_drops_the_held_jobs_and_nothing_is_released_again(sql_broker: SqlBroker) -> None:
    stage(sql_broker, Feed(parallel=2), 6)
    assert sql_broker.feeds.cancel("T") == 4
    assert sql_broker.feeds.state("T") is None
    assert sql_broker.feeds.cancel("T") == 0
    assert sql_broker.feeds.update("T", FeedChange(parallel=5)) is None
    fetcher = sql_broker.fetcher("me")
    fetcher.settle(claim_all(fetcher), [])
    assert rows(sql_broker) == []


def test_state_is_none_for_a_task_without_a_feed(sql_broker: SqlBroker) -> None:
    assert sql_broker.feeds.state("nothing") is None


def test_keyed_jobs_of_a_fed_task_go_through_their_keys_lines(sql_broker: SqlBroker) -> None:
    stage(sql_broker, Feed(parallel=3), 5, concurrency_key="k", concurrency_limit=1)
    assert [(item, state) for item, state in states(sql_broker)] == [
        (0, "queued"),
        (1, "lane"),
        (2, "lane"),
        (3, "held"),
        (4, "held"),
    ]
    assert checked(sql_broker) == FeedState(Feed(parallel=3), held=2, out=3)
    fetcher = sql_broker.fetcher("me")
    fetcher.register()
    done: list[int] = []
    units = claim_all(fetcher)
    while units:
        assert len(units) == 1
        done += items(units)
        state = checked(sql_broker)
        assert state is not None and state.out <= 3
        # On PostgreSQL a keyed acknowledgement releases the next keyed job right after its
        # commit (it holds keys' locks already): the next claim takes it.
        units = acked_and_claimed(fetcher, units)
    assert done == list(range(5))
    assert rows(sql_broker) == []


def test_an_unkeyed_acknowledgement_releases_a_keyed_job_through_its_line(sql_broker: SqlBroker) -> None:
    stage(sql_broker, Feed(parallel=1), 2)
    sql_broker.push([(job(7, concurrency_key="k"), None)])
    assert states(sql_broker) == [(0, "queued"), (1, "held"), (7, "held")]
    fetcher = sql_broker.fetcher("me")
    fetcher.register()
    [unit] = claim_all(fetcher)
    assert items(acked_and_claimed(fetcher, [unit])) == [7]
    assert [(r.state, r.holds) for r in rows(sql_broker) if r.lane] == [("queued", True)]
    assert checked(sql_broker) == FeedState(Feed(parallel=1), held=1, out=1)


def test_acknowledgements_with_transitions_release_unkeyed_and_keyed_jobs(sql_broker: SqlBroker) -> None:
    """The worker's usual claim: transitions to record with the acknowledgement (the feeds'
    lock comes after them); the next held job keyed, then unkeyed."""
    jobs = stage(sql_broker, Feed(parallel=1), 2)
    sql_broker.push([(job(7, concurrency_key="k"), None)])
    fetcher = sql_broker.fetcher("me")
    fetcher.register()
    done: list[int] = []
    units = claim_all(fetcher)
    while units:
        done += items(units)
        finished = [status(payload.loads(u.payload)["jid"], EventStatus.FINISH).encode() for u in units]
        state = checked(sql_broker)
        assert state is not None and state.out <= 1
        units = fetcher.claim(10, units, finished) or claim_all(fetcher)
    assert done == [0, 7, 1]
    assert rows(sql_broker) == []
    assert len(jobs) == 2


def test_malformed_payloads_never_fail_a_statement(sql_broker: SqlBroker) -> None:
    stage(sql_broker, Feed(parallel=1), 3, concurrency_key="k")
    fetcher = sql_broker.fetcher("me")
    fetcher.register()
    # A held keyed row whose payload is no longer a job; another whose key is not a string.
    held = [r.id for r in rows(sql_broker) if r.state == "held"]
    with sql_broker.engine.begin() as connection:
        connection.execute(
            update(QueuedJob).where(QueuedJob.id == held[0]).values(payload='{"feed": "T", [}')
        )
        bad_key = json.dumps(job(2, concurrency_key=7))
        connection.execute(update(QueuedJob).where(QueuedJob.id == held[1]).values(payload=bad_key))
    [unit] = claim_all(fetcher)
    # Released without its key (runs as a push of an unreadable job would), then buried by the worker.
    [broken] = acked_and_claimed(fetcher, [unit])
    assert broken.payload == b'{"feed": "T", [}'
    sql_broker.kill(broken, broken.payload.decode())
    [last] = claim_all(fetcher)
    assert items([last]) == [2]
    fetcher.settle([last], [])
    # Pushes naming no usable feed are ordinary pushes.
    odd = [base.job("Odd", feed=123), base.job("Odd", feed="x" * 100), base.job("Odd", feed="T\x00")]
    sql_broker.push([(j, None) for j in odd])
    assert {(r.state, r.feed) for r in rows(sql_broker) if r.state != "dead"} == {("queued", None)}
    assert checked(sql_broker) == FeedState(Feed(parallel=1), held=0, out=3 - 3)


def test_an_unfed_acknowledgement_takes_no_feed_statement(
    sql_broker: SqlBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gate: a job without the field never reaches the feeds (its ack is the plain claim);
    a fed one does: right after the claim's commit on PostgreSQL, by the feeds' lock in the
    claim's transaction elsewhere."""
    stage(sql_broker, Feed(parallel=1), 2)
    sql_broker.push([(base.job("Plain"), None)])
    fetcher = sql_broker.fetcher("me")
    units = claim_all(fetcher)
    plain = [u for u in units if b'"feed"' not in u.payload]
    calls: list[str] = []
    lock_of_rows, release_now = sql_broker.feeds.lock_of_rows, sql_broker.feeds.release_now

    def locked(*args: Any) -> Any:
        calls.append("lock_of_rows")
        return lock_of_rows(*args)

    def released(*args: Any) -> Any:
        calls.append("release_now")
        return release_now(*args)

    monkeypatch.setattr(sql_broker.feeds, "lock_of_rows", locked)
    monkeypatch.setattr(sql_broker.feeds, "release_now", released)
    fetcher.claim(10, plain, [])
    assert calls == []
    fetcher.claim(10, [u for u in units if u not in plain], [])
    assert calls == ["release_now" if sql_broker.store.postgres else "lock_of_rows"]
    assert checked(sql_broker) == FeedState(Feed(parallel=1), held=0, out=1)


ACKS: dict[str, Callable[[Any, UnitOfWork], object]] = {
    "settle": lambda fetcher, unit: fetcher.settle([unit], []),
    # The claim, whose feeds are released after its commit.
    "claim": lambda fetcher, unit: fetcher.claim(1, [unit], []),
    # The claim's transaction with transitions to record.
    "claim with transitions": lambda fetcher, unit: fetcher.claim(
        1, [unit], [status(payload.loads(unit.payload)["jid"], EventStatus.FINISH).encode()]
    ),
}


def _hold_the_feed_lock_and_release_two(other: Any, broker: SqlBroker) -> None:
    """What an update raising parallel to 3 does, in ``other``'s transaction, which holds the
    feed's lock (taken before) until it commits."""
    other.execute(update(FeedRow).where(FeedRow.task_id == "T").values(parallel=3))
    other.execute(
        text(
            "UPDATE asynctask_job SET state = 'queued' WHERE id IN (SELECT id FROM asynctask_job "
            "WHERE state = 'held' ORDER BY id LIMIT 2)"
        )
    )
    other.execute(update(FeedRow).where(FeedRow.task_id == "T").values(held=FeedRow.held - 2))


def _ack_while_parallel_is_raised(
    sql_broker: SqlBroker, ack: str, reached: Callable[[UnitOfWork], object]
) -> None:
    """A feed of parallel 1: its one claimed job is acknowledged by ``ack`` in a thread while
    another connection holds the feed's lock; once ``reached`` holds, that connection raises
    parallel to 3 and commits."""
    stage(sql_broker, Feed(parallel=1), 5)
    fetcher = sql_broker.fetcher("me")
    [unit] = claim_all(fetcher)
    with sql_broker.engine.connect() as other:
        with other.begin():
            other.execute(text("SELECT task_id FROM asynctask_feed WHERE task_id = 'T' FOR UPDATE"))
            acked = threading.Thread(target=ACKS[ack], args=(fetcher, unit))
            acked.start()
            wait_until(lambda: reached(unit), 10)
            _hold_the_feed_lock_and_release_two(other, sql_broker)
        acked.join(30)
    assert not acked.is_alive()


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_a_settle_racing_an_update_counts_what_the_update_released(sql_broker: SqlBroker) -> None:
    """READ COMMITTED: an update holds the feed's lock and raises parallel while a settle of
    one of its jobs waits for that lock. The settle's release must count the job the update
    released (its statement runs after the lock is granted), or the feed would go over parallel."""
    _ack_while_parallel_is_raised(sql_broker, "settle", lambda unit: _waiting_for_a_lock(sql_broker))
    # Three out (two by the update, one by the settle), not four.
    assert checked(sql_broker) == FeedState(Feed(parallel=3), held=1, out=3)


@pytest.mark.parametrize("ack", ["claim", "claim with transitions"])
@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_a_claim_never_waits_for_its_feeds_lock_and_its_slot_is_counted_after_it(
    sql_broker: SqlBroker, ack: str
) -> None:
    """An acknowledgement in a claim finds its feed locked by an update raising parallel: it
    commits without waiting (every end of a feed would commit one after the other), then
    releases once the lock is free, so the slot it freed is counted even though the update's
    release could not see it: the feed ends at parallel, never over it."""
    _ack_while_parallel_is_raised(sql_broker, ack, lambda unit: not _row_exists(sql_broker, int(unit.ref)))
    # Two by the update, one by the release after the acknowledgement's commit.
    assert checked(sql_broker) == FeedState(Feed(parallel=3), held=1, out=3)


def test_a_release_wakes_idle_workers_while_a_claim_takes_the_jobs_it_saw_waiting(
    make_sql_broker: Callable[..., SqlBroker],
) -> None:
    """A release reads the queue before a claim under way commits: the job it sees waiting
    is that claim's, and a worker whose claim skipped it (locked) went idle. The release must
    wake that worker; left to its fetch timeout (a minute here), a feed's released jobs waited
    while every worker slept."""
    broker = make_sql_broker()
    if not broker.store.postgres:
        pytest.skip("SQLite has no notifications: idle workers poll")
    stage(broker, Feed(parallel=1), 2)
    acking = broker.fetcher("acking")
    [unit] = claim_all(acking)
    broker.push([(base.job("Unfed"), None)])
    [unfed] = base.rows(broker, QueuedJob.feed.is_(None))
    idle = make_sql_broker(fetch_timeout=60.0).fetcher("idle")
    got: list[UnitOfWork | None] = []
    with broker.engine.connect() as claiming:
        with claiming.begin():
            # A claim under way: the row is locked, not yet marked claimed.
            claiming.execute(text("SELECT id FROM asynctask_job WHERE id = :id FOR UPDATE"), {"id": unfed.id})
            waiting = threading.Thread(target=lambda: got.append(idle.fetch(None, 0)))
            waiting.start()
            wait_until(lambda: idle._watching, 10)
            time.sleep(0.2)
            acking.claim(0, [unit], [])
            claiming.execute(
                text("UPDATE asynctask_job SET locked_by = 'other' WHERE id = :id"), {"id": unfed.id}
            )
        waiting.join(10)
    woken = not waiting.is_alive()
    idle.interrupt()
    waiting.join(10)
    assert woken, "the idle worker heard nothing of the release"
    assert items([u for u in got if u is not None]) == [1]


def _row_exists(broker: SqlBroker, row_id: int) -> bool:
    with broker.engine.connect() as connection:
        query = text("SELECT 1 FROM asynctask_job WHERE id = :id")
        return connection.execute(query, {"id": row_id}).first() is not None


def _waiting_for_a_lock(broker: SqlBroker) -> bool:
    with broker.engine.connect() as connection:
        query = text(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND datname = current_database() AND query LIKE '%asynctask_feed%'"
        )
        return bool(connection.execute(query).scalar())


def test_workers_racing_never_run_a_job_twice_nor_lose_one_nor_exceed_parallel(
    make_sql_broker: Callable[..., SqlBroker],
) -> None:
    """Threads of three processes claim and acknowledge a fed task's jobs while the ticker
    runs and a watcher reads the rows: every job runs once, and the feed never has more
    than parallel jobs out."""
    broker = make_sql_broker(concurrency=8)
    count, parallel = 60, 3
    stage(broker, Feed(parallel=parallel), count)
    seen: list[int] = []
    outs: list[int] = []
    errors: list[BaseException] = []
    done = threading.Event()
    lock = threading.Lock()

    def work(identity: str) -> None:
        try:
            fetcher = make_sql_broker().fetcher(identity)
            fetcher.register()
            units: list[UnitOfWork] = []
            while not done.is_set():
                units = fetcher.claim(2, units, [])
                with lock:
                    seen.extend(items(units))
                    if len(seen) >= count:
                        done.set()
                if not units:
                    time.sleep(0.005)
            fetcher.settle(units, [])
        except BaseException as exc:
            errors.append(exc)
            done.set()

    def watch() -> None:
        out = select(func.count()).where(QueuedJob.feed == "T", QueuedJob.state.in_(["queued", "lane"]))
        try:
            while not done.is_set():
                with broker.engine.connect() as connection:
                    outs.append(int(connection.execute(out).scalar_one()))
                broker.feeds.tick()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(f"w{n}",)) for n in range(3)]
    threads.append(threading.Thread(target=watch))
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    assert sorted(seen) == list(range(count))
    assert outs and max(outs) <= parallel
    assert checked(broker) == FeedState(Feed(parallel=parallel), held=0, out=0)


def test_an_acknowledgement_names_its_feed_as_the_worker_read_it() -> None:
    # The worker decoded the payload to run it: the fetcher does not decode it again.
    unit = UnitOfWork("default", b'{"feed" cut short', 1, ("T", "jid"))
    assert acknowledged_feed(unit) == "T"
    assert acknowledged_feed(UnitOfWork("default", b'{"feed" cut short', 1)) is None
    assert acknowledged_feed(UnitOfWork("default", json.dumps({"feed": "U"}).encode(), 1)) == "U"
    assert acknowledged_feed(UnitOfWork("default", b"{}", 1, ("x" * 33, "jid"))) is None


def test_a_release_is_planned_once_per_connection(sql_broker: SqlBroker) -> None:
    """Planning a feed's release costs more than running it: a connection prepares the
    statement at its first run and runs its generic plan from then on."""
    if not sql_broker.store.postgres:
        pytest.skip("SQLite releases in the acknowledgement's own transaction, at every end")
    stage(sql_broker, Feed(parallel=1), 8)
    fetcher = sql_broker.fetcher("me")
    [unit] = claim_all(fetcher)
    for _ in range(6):
        # One thread, one call after the other: the pool's one connection runs them all. The
        # acknowledgement's end releases the next job, after the claim.
        [unit] = acked_and_claimed(fetcher, [unit])
    assert base.generic_runs_only(sql_broker, "WITH seen AS%") == 6
