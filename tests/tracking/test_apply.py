"""The SQL apply step on its own: order, replays and counts, on SQLite and PostgreSQL."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

import redis
from sqlalchemy import Engine, func, select

from asynctask import Tracking, job
from asynctask.registry import Registry
from asynctask.tracking.apply import apply_transitions
from asynctask.tracking.database import writer
from asynctask.tracking.flusher import Flusher
from asynctask.tracking.models import Event, EventMessage
from asynctask.tracking.outbox import pack
from asynctask.tracking.status import EventStatus
from asynctask.tracking.transitions import LOG, PROGRESS, Transition, decode_entry, status


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
    tracking: Tracking, registry: Registry, engine: Engine
) -> None:
    task_id, (jid,) = make_task(tracking, registry, 1)
    working, finish = numbered(
        [status(jid, EventStatus.WORKING, "started"), status(jid, EventStatus.FINISH, "finished")]
    )
    apply(engine, [finish])
    apply(engine, [working])
    view = tracking.get_task(task_id)
    assert view.counts["finish"] == 1 and view.counts["working"] == 0 and view.status == "finished"
    (event,) = tracking.list_events(task_id).items
    assert event.status == "finish"
    # Both messages are kept, in the order things happened (by seq), not the order applied.
    assert [m.text for m in event.messages] == ["started", "finished"]


def test_replaying_batches_in_any_order_gives_the_same_result(
    tracking: Tracking, registry: Registry, engine: Engine
) -> None:
    task_id, jids = make_task(tracking, registry, 40)
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
        apply(engine, batch)
    view = tracking.get_task(task_id)
    failed = sum(1 for n in range(40) if n % 5 == 0)
    assert view.counts == {
        "enqueue": 0,
        "working": 0,
        "finish": 40 - failed,
        "failed": failed,
        "error": 0,
        "cancelled": 0,
    }
    events = {e.job_id: e for e in tracking.list_events(task_id, limit=100).items}
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
    with engine.connect() as connection:
        assert connection.execute(select(func.count()).select_from(EventMessage)).scalar() == sum(
            1 for t in history if t.text
        )


def test_the_flusher_applies_the_stream_and_drops_only_malformed_entries(
    tracking: Tracking, registry: Registry, engine: Engine, conn: redis.Redis
) -> None:
    task_id, (jid,) = make_task(tracking, registry, 1)
    keys = tracking.client.keys
    conn.xadd(keys.tracking_stream, {"s": 1, "d": "not json"})
    good = [
        status(jid, EventStatus.WORKING, "started").encode(),
        status(jid, EventStatus.FINISH, "ok").encode(),
    ]
    conn.xadd(keys.tracking_stream, {"s": 2, "d": pack(good)})
    flusher = Flusher(conn, keys, writer(engine), "test-flusher")
    assert flusher.flush() == 2
    assert tracking.get_task(task_id).status == "finished"
    assert conn.xlen(keys.tracking_stream) == 0
    assert decode_entry(5, pack(good))[1].seq == 6
    with engine.connect() as connection:
        assert connection.execute(select(Event.seq).where(Event.job_id == jid)).scalar() == 3
