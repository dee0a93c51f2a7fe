"""``create_task`` of many items (one job each): total time, and where it goes.

The library is not modified to find the split. Two timers are attached from the outside
to the one ``Tracking`` under test: a SQLAlchemy ``begin`` listener on its engine (the
first transaction create_task opens writes the task and its events) and a wrapper around
the ``publish`` of the staging area its client's broker hands out (the one script that
moves all staged jobs onto the queue). So, in call order:

- *prepare*: call -> first SQL BEGIN (the first batch's chunks, payloads, client middleware);
- *SQL*: BEGIN -> publish starts (batch by batch: event rows written and jobs staged in
  Redis; then the COMMIT);
- *push*: the publish script;
- *finish*: publish returned -> create_task returned (state -> ready, and the get_task that
  ``Tracking.create_task`` returns).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from redis import RedisError
from sqlalchemy import event
from sqlalchemy.exc import SQLAlchemyError

from asynctask import Client, Settings, Tracking
from asynctask.brokers.base import Staging
from asynctask.db.engine import create_database_engine
from asynctask.feeds import Feed
from bench.core.redis_server import RedisServer
from bench.core.system import asynctask_queued
from bench.core.tracked_jobs import tracked_noop_job


@dataclass
class CreateRun:
    database: str
    items: int
    total_s: float = 0.0
    prepare_s: float = 0.0
    sql_s: float = 0.0
    push_s: float = 0.0
    finish_s: float = 0.0
    queued: int = 0
    error: str = ""

    @property
    def rate(self) -> float:
        return self.items / self.total_s if self.total_s > 0 else 0.0


def create(database: str, url: str, server: RedisServer, items: int) -> CreateRun:
    """Time one ``Tracking.create_task(job, range(items), chunk_size=1)`` into an empty database."""
    run = CreateRun(database, items)
    with server.client() as conn:
        conn.flushall()
    client = Client(Settings(redis_url=server.url))
    engine = create_database_engine(url)
    marks: dict[str, float] = {}

    def on_begin(_connection: Any) -> None:
        marks.setdefault("begin", time.perf_counter())

    event.listen(engine, "begin", on_begin)
    setattr(client.broker, "staging", _timed(client.broker.staging, marks))  # noqa: B010 (a method)
    tracking = Tracking(client, engine)
    try:
        client.redis.ping()
        with engine.connect() as connection:
            connection.exec_driver_sql("SELECT 1")  # the pool's connection is open before timing
        marks.clear()
        # Garbage of earlier runs would otherwise be collected on our clock.
        gc.collect()
        start = time.perf_counter()
        tracking.create_task(tracked_noop_job, range(items), chunk_size=1)
        end = time.perf_counter()
        run.total_s = end - start
        run.prepare_s = marks["begin"] - start
        run.sql_s = marks["push"] - marks["begin"]
        run.push_s = marks["pushed"] - marks["push"]
        run.finish_s = end - marks["pushed"]
        run.queued = asynctask_queued(client.redis)
        if run.queued != items:
            run.error = f"{run.queued} jobs queued, expected {items}"
    except (RedisError, SQLAlchemyError, KeyError) as exc:
        run.error = f"{type(exc).__name__}: {exc}"
    finally:
        client.broker.close()
        engine.dispose()
    return run


def _timed(
    staging: Callable[[str, Feed | None, str | None], Staging], marks: dict[str, float]
) -> Callable[[str, Feed | None, str | None], Staging]:
    def timed_staging(task_id: str, feed: Feed | None = None, share: str | None = None) -> Staging:
        area = staging(task_id, feed, share)
        publish = area.publish

        def timed_publish() -> int:
            marks["push"] = time.perf_counter()
            try:
                return publish()
            finally:
                marks["pushed"] = time.perf_counter()

        setattr(area, "publish", timed_publish)  # noqa: B010 (a method)
        return area

    return timed_staging
