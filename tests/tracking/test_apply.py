"""The SQL apply step on its own: order, replays and counts, on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from sqlalchemy import Engine, func, select
from sqlalchemy.exc import OperationalError

from asynctask import JobDefinition, Tracking, job
from asynctask.brokers.redis.flusher import Flusher
from asynctask.db.engine import as_utc, create_database_engine, writer
from asynctask.registry import Registry
from asynctask.tracking.apply import Applied, apply_transitions
from asynctask.tracking.models import Event, EventMessage
from asynctask.tracking.outbox import pack
from asynctask.tracking.status import EventStatus
from asynctask.tracking.transitions import ITEMS, LOG, PROGRESS, Transition, decode_entry, status


def numbered(transitions: Sequence[Transition], first: int = 1) -> list[Transition]:
    return [replace(t, seq=first + n) for n, t in enumerate(transitions)]


def apply(engine: Engine, batch: Sequence[Transition]) -> None:
    with writer(engine).begin() as connection:
        apply_transitions(connection, batch)


def make_task(tracking: Tracking, registry: Registry, size: int) -> tuple[str, list[str]]:
    @job(registry=registry)
    def noop(items: list[int]) -> None:
        pass

    task = tracking.create_task(noop, range(size))
    page = tracking.list_events(task.id, limit=size)
    return task.id, [e.job_id for e in page.items]


def test_a_late_working_never_overwrites_finish(
    redis_tracking: Tracking, registry: Registry, database_engine: Engine
) -> None:
    task_id, (jid,) = make_task(redis_tracking, registry, 1)
    working, finish = numbered(
        [status(jid, EventStatus.WORKING, "started"), status(jid, EventStatus.FINISH, "finished")]
    )
    apply(database_engine, [finish])
    apply(database_engine, [working])
    view = redis_tracking.get_task(task_id)
    assert view.counts["finish"] == 1 and view.counts["working"] == 0 and view.status == "finished"
    (event,) = redis_tracking.list_events(task_id).items
    assert event.status == "finish"
    # Both messages are kept, in the order things happened (by seq), not the order applied.
    assert [m.text for m in event.messages] == ["started", "finished"]


def test_replaying_batches_in_any_order_gives_the_same_result(
    redis_tracking: Tracking, registry: Registry, database_engine: Engine
) -> None:
    task_id, jids = make_task(redis_tracking, registry, 40)
    history: list[Transition] = []
    for n, jid in enumerate(jids):
        history.append(status(jid, EventStatus.WORKING, "started"))
        history.append(Transition(jid, PROGRESS, 0.0, done=n, total=40))
        history.append(Transition(jid, LOG, 0.0, f"row {n}"))
        history.append(Transition(jid, PROGRESS, 0.0, done=n + 1, total=41))
        if n % 4 == 0:
            history.append(status(jid, EventStatus.ERROR, "RuntimeError: x", error_class="RuntimeError"))
            history.append(status(jid, EventStatus.ENQUEUE, "waiting for retry 1 of 1"))
            history.append(status(jid, EventStatus.WORKING, "started"))
            history.append(Transition(jid, PROGRESS, 0.0, done=n + 2, total=42))
        history.append(status(jid, EventStatus.FAILED if n % 5 == 0 else EventStatus.FINISH, "done"))
    history = numbered(history)
    batches = [history[i : i + 7] for i in range(0, len(history), 7)]
    shuffled = batches * 2
    random.Random(3).shuffle(shuffled)
    for batch in shuffled:
        apply(database_engine, batch)
    view = redis_tracking.get_task(task_id)
    failed = sum(1 for n in range(40) if n % 5 == 0)
    assert view.counts == {
        "enqueue": 0,
        "working": 0,
        "finish": 40 - failed,
        "failed": failed,
        "error": 0,
        "cancelled": 0,
        "stopped": 0,
        "lost": 0,
    }
    events = {e.job_id: e for e in redis_tracking.list_events(task_id, limit=100).items}
    for n, jid in enumerate(jids):
        event = events[jid]
        assert event.attempt == (2 if n % 4 == 0 else 1)
        # The latest progress of the latest run, whichever batch brought it last.
        latest = (n + 2, 42) if n % 4 == 0 else (n + 1, 41)
        assert (event.progress_done, event.progress_total) == latest, n
        expected = ["started", f"row {n}"]
        if n % 4 == 0:
            expected += ["RuntimeError: x", "waiting for retry 1 of 1", "started"]
        assert [m.text for m in event.messages] == [*expected, "done"]
    with database_engine.connect() as connection:
        assert connection.execute(select(func.count()).select_from(EventMessage)).scalar() == sum(
            1 for t in history if t.text
        )


def test_the_flusher_applies_the_stream_and_drops_only_malformed_entries(
    redis_tracking: Tracking, registry: Registry, database_engine: Engine, conn: redis.Redis
) -> None:
    task_id, (jid,) = make_task(redis_tracking, registry, 1)
    keys = redis_tracking.client.keys
    conn.xadd(keys.tracking_stream, {"s": 1, "d": "not json"})
    good = [
        status(jid, EventStatus.WORKING, "started").encode(),
        status(jid, EventStatus.FINISH, "ok").encode(),
    ]
    conn.xadd(keys.tracking_stream, {"s": 2, "d": pack(good)})
    # A status or a time of the wrong type: malformed too, not an error that stops every batch.
    conn.xadd(keys.tracking_stream, {"s": 4, "d": f'[["{jid}", ["finish"], 1.0]]'})
    conn.xadd(keys.tracking_stream, {"s": 5, "d": f'[["{jid}", "finish", null]]'})
    flusher = Flusher(conn, keys, writer(database_engine), "test-flusher")
    assert flusher.flush() == 4
    assert redis_tracking.get_task(task_id).status == "finished"
    assert conn.xlen(keys.tracking_stream) == 0
    assert decode_entry(5, pack(good))[1].seq == 6
    with database_engine.connect() as connection:
        assert connection.execute(select(Event.seq).where(Event.job_id == jid)).scalar() == 3


def test_a_large_batch_is_applied_in_parts_at_once_each_job_whole_in_one_part(
    redis_tracking: Tracking, registry: Registry, database_engine: Engine, conn: redis.Redis
) -> None:
    task_id, jids = make_task(redis_tracking, registry, 900)
    keys = redis_tracking.client.keys
    # Nine entries of a hundred jobs each, every job's start, log line and end together: one
    # batch of 2,700 transitions.
    seq = 1
    for start in range(0, 900, 100):
        chunk = [
            encoded
            for jid in jids[start : start + 100]
            for encoded in (
                status(jid, EventStatus.WORKING, "started").encode(),
                Transition(jid, LOG, time.time(), "step").encode(),
                status(jid, EventStatus.FINISH, "finish").encode(),
            )
        ]
        conn.xadd(keys.tracking_stream, {"s": seq, "d": pack(chunk)})
        seq += len(chunk)
    flusher = Flusher(conn, keys, writer(database_engine), "test-flusher", parallel=3)
    parts: list[tuple[str, set[str]]] = []
    running = [0, 0]  # now, most at once
    lock = threading.Lock()
    write = flusher._write

    def watched_write(apply: Any, batch: Sequence[Transition], malformed: Any) -> Applied:
        with lock:
            parts.append((threading.current_thread().name, {t.jid for t in batch}))
            running[0] += 1
            running[1] = max(running)
        # Long enough for the other parts to start meanwhile.
        time.sleep(0.1)
        try:
            return write(apply, batch, malformed)
        finally:
            with lock:
                running[0] -= 1

    flusher._write = watched_write  # type: ignore[method-assign]
    try:
        assert flusher.flush() == 9
    finally:
        flusher.stop()
    assert len(parts) == 3 and running[1] == 3
    assert len({name for name, _ in parts}) == 3
    assert sum(len(part) for _, part in parts) == len(set().union(*(part for _, part in parts))) == 900
    view = redis_tracking.get_task(task_id)
    assert view.counts["finish"] == 900 and view.counts["working"] == 0 and view.status == "finished"
    events = redis_tracking.list_events(task_id, limit=900).items
    assert {e.attempt for e in events} == {1}
    assert {tuple(m.text for m in e.messages) for e in events} == {("started", "step", "finish")}


def test_a_batch_whose_part_fails_is_retried_only_once_every_part_has_ended(
    redis_tracking: Tracking, registry: Registry, database_engine: Engine, conn: redis.Redis
) -> None:
    task_id, jids = make_task(redis_tracking, registry, 600)
    keys = redis_tracking.client.keys
    # 1,200 transitions: two parts.
    started = [
        status(jid, kind, kind.value).encode()
        for jid in jids
        for kind in (EventStatus.WORKING, EventStatus.FINISH)
    ]
    conn.xadd(keys.tracking_stream, {"s": 1, "d": pack(started)})
    flusher = Flusher(conn, keys, writer(database_engine), "test-flusher", parallel=2)
    ended: list[str] = []
    write = flusher._write

    def one_part_fails(apply: Any, batch: Sequence[Transition], malformed: Any) -> Applied:
        if batch[0].jid == flusher._split(list(decode_entry(1, pack(started))))[0][0].jid:
            raise OperationalError("SELECT 1", {}, Exception("connection lost"))
        time.sleep(0.3)
        due = write(apply, batch, malformed)
        ended.append(batch[0].jid)
        return due

    flusher._write = one_part_fails  # type: ignore[method-assign]
    entries = flusher._read(block=False)
    with pytest.raises(OperationalError):
        flusher._apply(entries)
    # The other part had committed when the batch failed: its retry would not run beside it.
    assert len(ended) == 1
    assert conn.xlen(keys.tracking_stream) == 1
    flusher._write = write  # type: ignore[method-assign]
    flusher._apply(entries)
    flusher.stop()
    assert redis_tracking.get_task(task_id).counts["finish"] == 600


def test_entries_written_one_by_one_in_quick_succession_share_one_transaction(
    redis_tracking: Tracking, registry: Registry, database_engine: Engine, conn: redis.Redis
) -> None:
    """Work horses write a job's start alone, then its end: the flusher gathers such entries for
    a moment instead of paying a transaction for each."""
    task_id, jids = make_task(redis_tracking, registry, 3)
    keys = redis_tracking.client.keys

    def write(jid: str) -> None:
        conn.xadd(
            keys.tracking_stream, {"s": 1, "d": pack([status(jid, EventStatus.WORKING, "started").encode()])}
        )

    class Meanwhile:
        """The flusher's stop signal, whose wait sees the other two horses write."""

        def is_set(self) -> bool:
            return False

        def wait(self, timeout: float | None = None) -> bool:
            write(jids[1])
            write(jids[2])
            return False

    flusher = Flusher(conn, keys, writer(database_engine), "test-flusher")
    flusher._stopped = Meanwhile()  # type: ignore[assignment]
    write(jids[0])
    batch = flusher._gathered()
    assert len(batch) == 3
    flusher._apply(batch)
    assert redis_tracking.get_task(task_id).counts["working"] == 3


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def event_row(engine: Engine, jid: str) -> Any:
    """The event's row, its times in UTC (SQLite returns them naive)."""
    with engine.connect() as connection:
        row = connection.execute(select(Event.__table__).where(Event.job_id == jid)).one()._asdict()
    times = ("enqueued_at", "started_at", "finished_at", "updated_at")
    return SimpleNamespace(**{**row, **{name: as_utc(row[name]) for name in times}})


def test_each_status_sets_its_times_and_a_new_run_starts_without_the_old_progress(
    redis_tracking: Tracking, registry: Registry, database_engine: Engine
) -> None:
    task_id, (jid,) = make_task(redis_tracking, registry, 1)
    t = time.time()
    working, progress, late_progress, error, enqueue, working_again, finish = numbered(
        [
            Transition(jid, EventStatus.WORKING.value, t + 1, "started"),
            Transition(jid, PROGRESS, t + 1.1, done=5, total=10),
            Transition(jid, PROGRESS, t + 1.2, done=6, total=10),
            Transition(jid, EventStatus.ERROR.value, t + 2, "RuntimeError: x", error_class="RuntimeError"),
            Transition(jid, EventStatus.ENQUEUE.value, t + 3, "waiting for retry 1 of 1"),
            Transition(jid, EventStatus.WORKING.value, t + 4, "started"),
            Transition(jid, EventStatus.FINISH.value, t + 5, "finished"),
        ]
    )
    apply(database_engine, [working, progress])
    row = event_row(database_engine, jid)
    assert (row.status, row.started_at, row.finished_at, row.updated_at) == (
        "working",
        at(t + 1),
        None,
        at(t + 1),
    )
    assert (row.progress_done, row.progress_total) == (5, 10)
    assert redis_tracking.get_task(task_id).started_at == at(t + 1)
    apply(database_engine, [error])
    row = event_row(database_engine, jid)
    assert (row.status, row.finished_at, row.updated_at, row.error) == (
        "error",
        at(t + 2),
        at(t + 2),
        "RuntimeError: x",
    )
    apply(database_engine, [enqueue])
    row = event_row(database_engine, jid)
    assert (row.status, row.enqueued_at, row.finished_at, row.updated_at) == (
        "enqueue",
        at(t + 3),
        None,
        at(t + 3),
    )
    apply(database_engine, [working_again])
    # The first run's last progress arrives late: it is not the new run's.
    apply(database_engine, [late_progress])
    row = event_row(database_engine, jid)
    assert (row.status, row.started_at, row.finished_at) == ("working", at(t + 4), None)
    assert (row.progress_done, row.progress_total) == (None, None)
    # The new run's start replayed after its own progress leaves that progress alone.
    own_progress = replace(late_progress, seq=working_again.seq + 1, done=1, total=4)
    apply(database_engine, [own_progress])
    apply(database_engine, [working_again])
    row = event_row(database_engine, jid)
    assert (row.progress_done, row.progress_total, row.started_at) == (1, 4, at(t + 4))
    apply(database_engine, [replace(finish, seq=finish.seq + 1)])
    row = event_row(database_engine, jid)
    assert (row.status, row.finished_at, row.updated_at, row.attempt) == ("finish", at(t + 5), at(t + 5), 2)
    view = redis_tracking.get_task(task_id)
    assert view.started_at == at(t + 1) and view.finished_at is not None


def retried_once(jid: str, t: float) -> list[Transition]:
    """A job's start at ``t + 1``, its error, its enqueue for a retry and the retry's start, a
    second apart, numbered from 1."""
    return numbered(
        [
            Transition(jid, EventStatus.WORKING.value, t + 1, "started"),
            Transition(jid, EventStatus.ERROR.value, t + 2, "boom", error_class="RuntimeError"),
            Transition(jid, EventStatus.ENQUEUE.value, t + 3, "waiting for retry 1 of 1"),
            Transition(jid, EventStatus.WORKING.value, t + 4, "started"),
        ]
    )


def test_a_start_without_its_enqueue_yet_is_not_finished(
    redis_tracking: Tracking, registry: Registry, database_engine: Engine
) -> None:
    _, (jid,) = make_task(redis_tracking, registry, 1)
    t = time.time()
    working, error, enqueue, working_again = retried_once(jid, t)
    # The retry's start reaches SQL before the enqueue that preceded it (another flusher has it).
    apply(database_engine, [working, error])
    apply(database_engine, [working_again])
    apply(database_engine, [enqueue])
    row = event_row(database_engine, jid)
    assert (row.status, row.started_at, row.finished_at) == ("working", at(t + 4), None)


def test_late_transitions_of_an_earlier_run_leave_the_start_alone(
    redis_tracking: Tracking, registry: Registry, database_engine: Engine
) -> None:
    _, (first, second) = make_task(redis_tracking, registry, 2)
    t = time.time()
    # A retried job whose first start is replayed after its second.
    working, error, enqueue, working_again = retried_once(first, t)
    apply(database_engine, [working, error, enqueue, working_again])
    apply(database_engine, [working])
    assert event_row(database_engine, first).started_at == at(t + 4)
    # A late status of a job that has finished is not a start.
    started, failed, finish = numbered(
        [
            Transition(second, EventStatus.WORKING.value, t + 1, "started"),
            Transition(second, EventStatus.FAILED.value, t + 2, "no"),
            Transition(second, EventStatus.FINISH.value, t + 3, "finished"),
        ],
        first=100,
    )
    apply(database_engine, [started, finish])
    apply(database_engine, [failed])
    row = event_row(database_engine, second)
    assert (row.status, row.started_at, row.finished_at) == ("finish", at(t + 1), at(t + 3))


def test_which_transitions_leave_a_message(
    redis_tracking: Tracking, registry: Registry, database_engine: Engine
) -> None:
    task_id, (jid,) = make_task(redis_tracking, registry, 1)
    batch = numbered(
        [
            # A start without a text still reads "started", and counts as an attempt.
            Transition(jid, EventStatus.WORKING.value, 1.0),
            Transition(jid, LOG, 2.0, ""),
            Transition(jid, LOG, 3.0, None),
            Transition(jid, LOG, 4.0, "halfway"),
            Transition(jid, EventStatus.FINISH.value, 5.0),
        ]
    )
    apply(database_engine, batch)
    (event,) = redis_tracking.list_events(task_id).items
    assert [(m.status, m.text) for m in event.messages] == [("working", "started"), ("working", "halfway")]
    assert event.status == "finish" and event.attempt == 1


def test_apply_returns_how_many_events_it_changed(
    redis_tracking: Tracking, registry: Registry, database_engine: Engine
) -> None:
    _, jids = make_task(redis_tracking, registry, 3)
    batch = numbered([status(jid, EventStatus.WORKING, "started") for jid in jids[:2]])
    with writer(database_engine).begin() as connection:
        assert apply_transitions(connection, []).events == 0
        assert apply_transitions(connection, batch).events == 2
    with writer(database_engine).begin() as connection:
        assert apply_transitions(connection, batch).events == 0


def test_one_batch_moves_the_counts_and_times_of_each_of_its_tasks(
    redis_tracking: Tracking, noop_job: JobDefinition[Any], database_engine: Engine
) -> None:
    """A fair queue hands a worker one job of each task in turn: a batch spans many tasks."""
    tasks = [redis_tracking.create_task(noop_job, range(size)) for size in (3, 2, 1)]
    jids = [[e.job_id for e in redis_tracking.list_events(t.id, limit=3).items] for t in tasks]
    history = [status(jid, EventStatus.WORKING, "started") for group in jids for jid in group]
    # The first task: one job still running; the second: one failed; the third: all done.
    ends = [(0, 0, EventStatus.FINISH), (0, 1, EventStatus.FINISH), (1, 0, EventStatus.FAILED)]
    ends += [(1, 1, EventStatus.FINISH), (2, 0, EventStatus.FINISH)]
    history += [status(jids[task][n], end, "ended") for task, n, end in ends]
    apply(database_engine, numbered(history))

    first, second, third = (redis_tracking.get_task(t.id) for t in tasks)
    assert (first.counts["finish"], first.counts["working"], first.status) == (2, 1, "running")
    assert (second.counts["finish"], second.counts["failed"], second.counts["working"]) == (1, 1, 0)
    assert (third.counts["finish"], third.counts["enqueue"], third.status) == (1, 0, "finished")
    assert all(view.started_at is not None for view in (first, second, third))
    assert first.finished_at is None and third.finished_at is not None


def test_a_job_outside_any_task_gets_its_event_from_its_first_transition(
    redis_tracking: Tracking, database_engine: Engine
) -> None:
    started, lone, quiet, late = (
        f"{name}-job".ljust(24, "0") for name in ("started", "lone", "quiet", "late")
    )
    t = time.time()
    history = numbered(
        [
            # The first transition ever recorded: seq 1 must still apply to the new event.
            Transition(started, EventStatus.WORKING.value, t, "started", name="started", params=[]),
            Transition(quiet, LOG, t, "a log line before any status"),
            Transition(lone, EventStatus.ENQUEUE.value, t, name="lone", params=[7, "x"]),
            Transition(lone, EventStatus.WORKING.value, t + 1, "started", name="lone", params=[7, "x"]),
            Transition(lone, EventStatus.FINISH.value, t + 2, "finished"),
            # Out of order after an outage: a status without the job's name comes first.
            Transition(late, EventStatus.FAILED.value, t + 3, "no"),
            Transition(late, EventStatus.ENQUEUE.value, t + 4, "retried by request", name="late", params=[1]),
        ]
    )
    apply(database_engine, history[:3])
    apply(database_engine, history)
    row = event_row(database_engine, started)
    assert (row.job_name, row.status, row.started_at, row.attempt) == ("started", "working", at(t), 1)
    row = event_row(database_engine, lone)
    assert (row.task_id, row.job_name, row.params, row.status, row.attempt) == (
        None,
        "lone",
        [7, "x"],
        "finish",
        1,
    )
    assert (row.enqueued_at, row.started_at, row.finished_at) == (at(t), at(t + 1), at(t + 2))
    row = event_row(database_engine, quiet)
    assert (row.job_name, row.params, row.status) == (None, None, "enqueue")
    assert row.enqueued_at == row.updated_at == at(t)
    row = event_row(database_engine, late)
    assert (row.job_name, row.params, row.status) == ("late", [1], "enqueue")
    with database_engine.connect() as connection:
        assert connection.execute(select(func.count()).select_from(Event)).scalar() == 4


@contextmanager
def time_zone(name: str) -> Iterator[None]:
    before = os.environ.get("TZ")
    os.environ["TZ"] = name
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()


def test_times_are_stored_in_utc_whatever_the_local_time_zones(
    redis_tracking: Tracking, registry: Registry, database_url: str
) -> None:
    """The process's time zone and (on PostgreSQL) the session's are nine hours off UTC."""
    task_id, (jid,) = make_task(redis_tracking, registry, 1)
    url = database_url + ("%20-ctimezone%3DAsia/Tokyo" if "options=" in database_url else "")
    local = create_database_engine(url)
    t = time.time()
    try:
        with time_zone("Asia/Tokyo"):
            apply(local, numbered([Transition(jid, EventStatus.WORKING.value, t, "started")]))
            apply(local, numbered([Transition(jid, EventStatus.FINISH.value, t + 1, "finished")], first=2))
    finally:
        local.dispose()
    view = redis_tracking.get_task(task_id)
    assert view.started_at == at(t)
    assert view.finished_at is not None and abs(view.finished_at.timestamp() - time.time()) < 60


def items(jid: str, done: int, failed: int, position: int | None = None, item: Any = None) -> Transition:
    message = None if position is None else f"item {position} failed"
    return Transition(
        jid, ITEMS, time.time(), message, done=done, failed=failed, position=position, item=item
    )


def test_item_counts_only_move_forward_and_a_failed_item_is_stored_once(
    redis_tracking: Tracking, registry: Registry, database_engine: Engine
) -> None:
    task_id, (first, second) = make_task(redis_tracking, registry, 2)
    newer = numbered([items(first, 3, 1, 2, {"sku": "A"}), items(first, 5, 1), items(second, 1, 0)])
    apply(database_engine, newer)
    # The same batch again (a flusher's retry), then an older report after the newer ones.
    apply(database_engine, newer)
    apply(database_engine, numbered([items(first, 2, 1, 2, {"sku": "A"}), items(second, 0, 0)], first=1))
    view = redis_tracking.get_task(task_id)
    assert (view.items.done, view.items.failed) == (6, 1)
    by_jid = {e.job_id: e for e in redis_tracking.list_events(task_id).items}
    assert (by_jid[first].items_done, by_jid[first].items_failed) == (5, 1)
    assert (by_jid[second].items_done, by_jid[second].items_failed) == (1, 0)
    (failed,) = redis_tracking.list_failed_items(task_id).items
    assert (failed.job_id, failed.position, failed.item, failed.message) == (
        first,
        2,
        {"sku": "A"},
        "item 2 failed",
    )
    # A status transition in the same batch as item counts is applied as well.
    apply(
        database_engine, numbered([status(second, EventStatus.FINISH), items(second, 4, 2, 5, "x")], first=10)
    )
    view = redis_tracking.get_task(task_id)
    assert (view.items.done, view.items.failed, view.counts["finish"]) == (9, 3, 1)
    assert [f.position for f in redis_tracking.list_failed_items(task_id).items] == [2, 5]


def test_item_transitions_travel_through_the_stream_encoding() -> None:
    sent = items("j1", 7, 2, 4, {"name": "nul \x00 here"})
    (decoded,) = decode_entry(11, pack([sent.encode()]))
    assert (decoded.kind, decoded.done, decoded.failed, decoded.position) == (ITEMS, 7, 2, 4)
    assert decoded.item == {"name": "nul \\u0000 here"} and decoded.text == "item 4 failed"
    (counts,) = decode_entry(12, pack([items("j1", 8, 2).encode()]))
    assert (counts.done, counts.failed, counts.position, counts.item) == (8, 2, None, None)


def test_a_tasks_progress_counts_items_once_its_jobs_report_them(
    redis_tracking: Tracking, noop_job: JobDefinition[Any], database_engine: Engine
) -> None:
    # Two jobs of 10 items: the items say how far the task is before any job ends.
    task = redis_tracking.create_task(noop_job, range(20), chunk_size=10)
    first, second = (e.job_id for e in redis_tracking.list_events(task.id).items)
    apply(database_engine, numbered([status(first, EventStatus.WORKING), items(first, 4, 1, 2, "x")]))
    view = redis_tracking.get_task(task.id)
    assert (view.done, view.items.total, view.progress) == (0, 20, 0.25)
    apply(
        database_engine,
        numbered(
            [items(first, 9, 1), status(first, EventStatus.FINISH), items(second, 3, 0)],
            first=10,
        ),
    )
    view = redis_tracking.get_task(task.id)
    # One job of two is done, and 13 items of 20 ran: the items, not the jobs.
    assert (view.done, view.progress) == (1, 0.65)
