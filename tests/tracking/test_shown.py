"""Reads bounded in bytes whatever the rows hold: rows written before texts were bounded (or by
another writer) with megabytes of error and log, and an event with hundreds of messages."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, insert, select, update

from asynctask import Registry, Tracking, job, storable
from asynctask.tracking import shown
from asynctask.tracking.models import Event, EventMessage, Task
from asynctask.tracking.status import EventStatus
from asynctask.tracking.views import EventView
from webapi.serialize import event_json, task_json

BIG = 10 * 1024 * 1024
MARKER = "... (truncated, "


def poisoned_task(tracking: Tracking, registry: Registry, engine: Engine, jobs: int, messages: int) -> str:
    """A task of ``jobs`` failed events, each with a 10 MB error and ``messages`` messages, the
    first of them 10 MB: as no writer of this version leaves them."""

    @job(registry=registry)
    def rows(chunk: list[int]) -> None: ...

    task = tracking.create_task(rows, range(jobs))
    now = datetime.now(UTC)
    with engine.begin() as connection:
        ids = list(connection.scalars(select(Event.id).where(Event.task_id == task.id)))
        connection.execute(
            update(Event)
            .where(Event.task_id == task.id)
            .values(status=EventStatus.FAILED.value, error="e" * BIG)
        )
        connection.execute(update(Task).where(Task.id == task.id).values(count_enqueue=0, count_failed=jobs))
        for event_id in ids:
            connection.execute(
                insert(EventMessage),
                [
                    {
                        "event_id": event_id,
                        "seq": n,
                        "at": now,
                        "status": "working",
                        "text": "m" * (BIG if n == 0 else 40),
                    }
                    for n in range(messages)
                ],
            )
    return task.id


def size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":")))


def test_a_task_with_huge_errors_and_logs_reads_under_its_budget(
    redis_tracking: Tracking, registry: Registry, database_engine: Engine
) -> None:
    task_id = poisoned_task(redis_tracking, registry, database_engine, jobs=12, messages=3)
    view = redis_tracking.get_task(task_id)
    assert len(view.errors) == 10
    assert size(task_json(view)) < 256 * 1024
    for error in view.errors:
        assert error.error is not None and error.error.endswith(f"{MARKER}{BIG} bytes)")
        assert error.messages[0].text.endswith(f"{MARKER}{BIG} bytes)")
        assert [m.text for m in error.messages[1:]] == ["m" * 40] * 2
    page = redis_tracking.list_events(task_id, limit=1000)
    assert size([event_json(e) for e in page.items]) < shown.PAGE_BUDGET + 64 * 1024


def test_one_event_reads_its_error_and_log_up_to_the_tracked_text_limit(
    redis_tracking: Tracking, registry: Registry, database_engine: Engine
) -> None:
    task_id = poisoned_task(redis_tracking, registry, database_engine, jobs=1, messages=2)
    (event,) = redis_tracking.list_events(task_id, limit=1).items
    assert event.error is not None and len(event.error) > storable.DEFAULT_TEXT_LIMIT - 100
    assert event.error.endswith(f"{MARKER}{BIG} bytes)")


def test_only_the_latest_messages_are_read_and_the_rest_counted(
    redis_tracking: Tracking, registry: Registry, database_engine: Engine
) -> None:
    task_id = poisoned_task(redis_tracking, registry, database_engine, jobs=2, messages=500)
    events = redis_tracking.list_events(task_id).items
    for event in events:
        assert len(event.messages) == shown.MESSAGES_SHOWN
        assert event.earlier_messages == 500 - shown.MESSAGES_SHOWN
        assert event_json(event)["earlier_messages"] == 450
    # The latest, oldest first: the 10 MB first message is among those left out.
    assert all(m.text == "m" * 40 for m in events[0].messages)


def test_an_answer_that_fits_is_unchanged() -> None:
    event = EventView(
        1, "j", "t", "n", "failed", [["a" * 100]], 1, "x" * 1000, None, None, None, None, None, None, None
    )
    assert shown.fit([event], 10_000) == [event]
    (cut,) = shown.fit([event], 1000)
    assert cut.error is not None and cut.error.endswith("... (truncated, 1000 bytes)")
