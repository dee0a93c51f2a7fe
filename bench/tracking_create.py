"""``create_task`` of many items (one job each): total time, and where it goes.

The library is not modified to find the split. Two timers are attached from the outside
to the one ``Tracking`` under test: a SQLAlchemy ``begin`` listener on its engine (the
first transaction create_task opens is the task + events INSERT) and a wrapper around its
client's ``broker.push`` (the one MULTI/EXEC of all jobs). So, in call order:

- *prepare*: call -> first SQL BEGIN (chunking, payloads, client middleware; Python only);
- *SQL*: BEGIN -> push starts (the INSERTs of task and events, and their COMMIT);
- *push*: the Redis MULTI/EXEC of all jobs, encoding included;
- *finish*: push returned -> create_task returned (state -> ready, and the get_task that
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
from asynctask.tracking.database import create_database_engine
from bench.redis_server import RedisServer
from bench.tracked_jobs import tracked_noop_job


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
    setattr(client.broker, "push", _timed(client.broker.push, marks))  # noqa: B010 (a method)
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
        run.queued = int(client.redis.llen("queue:default"))
        if run.queued != items:
            run.error = f"{run.queued} jobs queued, expected {items}"
    except (RedisError, SQLAlchemyError, KeyError) as exc:
        run.error = f"{type(exc).__name__}: {exc}"
    finally:
        client.broker.close()
        engine.dispose()
    return run


def _timed(push: Callable[..., None], marks: dict[str, float]) -> Callable[..., None]:
    def timed_push(*args: Any, **kwargs: Any) -> None:
        marks["push"] = time.perf_counter()
        try:
            push(*args, **kwargs)
        finally:
            marks["pushed"] = time.perf_counter()

    return timed_push
