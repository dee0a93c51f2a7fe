"""``AsyncTracking``: the task API for code on an event loop, ``await asynctask.acreate_task(...)``,
``aget_task``, ``acancel_task``, ``alist_events`` and the rest, each ``Tracking``'s call awaited.

Each call runs the sync call's own code, on asyncio drivers: SQLAlchemy's asyncio extension
(psycopg's async mode, aiosqlite) for SQL, redis-py's asyncio client for Redis
(``brokers.redis.green``). The code runs in a greenlet that SQLAlchemy spawns for the
awaiting coroutine, as its asyncio extension runs a sync ``Session``: at each round trip the
greenlet hands the loop back until the reply arrives, so the loop runs other coroutines
meanwhile and no thread is involved. The guarantees are the sync calls': ``acreate_task`` is
all or nothing, and a cancelled task's jobs never start.

Work between round trips (building a batch of jobs, say) runs on the loop: ``acreate_task``
writes its items in batches of ``BATCH`` items, each up to a few tens of milliseconds of work.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from functools import partial
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from sqlalchemy.util import await_only, greenlet_spawn

from asynctask.async_client import PerLoop
from asynctask.client import Client
from asynctask.db.engine import create_async_database_engine
from asynctask.middleware import Chain
from asynctask.payload import JobDict
from asynctask.registry import Registry
from asynctask.settings import Settings
from asynctask.tasks.service import Tracking, named_like

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from asynctask.brokers.redis.green import GreenRedis

P = ParamSpec("P")
R = TypeVar("R")


def _awaited(
    call: Callable[Concatenate[Tracking, P], R],
) -> Callable[Concatenate[AsyncTracking, P], Coroutine[Any, Any, R]]:
    async def awaited(self: AsyncTracking, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await greenlet_spawn(partial(call, self.tracking, *args, **kwargs))

    return named_like(awaited, "a" + call.__name__, call)


def _sleep_awaited(seconds: float) -> None:
    await_only(asyncio.sleep(seconds))


class AsyncTracking:
    """``Tracking`` for an event loop: the same calls, awaited, named with an ``a`` in front.

    It belongs to the loop it was first used on, as its connections do; ``aclose`` closes them.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        middleware: Chain[JobDict] | None = None,
        registry: Registry | None = None,
    ) -> None:
        settings = settings or Settings.from_env()
        self.database = create_async_database_engine(settings.database_url)
        connection: Any
        self._redis: GreenRedis | None = None
        self._broker_database: AsyncEngine | None = None
        if settings.uses_redis:
            # Imported here: a SQL broker's process never loads the Redis asyncio client.
            from asynctask.brokers.redis.green import GreenRedis

            connection = self._redis = GreenRedis(settings.broker, replicas=settings.redis_min_replicas)
        else:
            self._broker_database = create_async_database_engine(settings.broker)
            connection = self._broker_database.sync_engine
        client = Client(settings, connection=connection, middleware=middleware, registry=registry)
        self.tracking = Tracking(client, self.database.sync_engine)
        self.tracking.sleep = _sleep_awaited
        self.tracking.sends_elsewhere = False

    acreate_task = _awaited(Tracking.create_task)
    achain = _awaited(Tracking.chain)
    aget_task = _awaited(Tracking.get_task)
    alist_events = _awaited(Tracking.list_events)
    alist_failed_items = _awaited(Tracking.list_failed_items)
    alist_tasks = _awaited(Tracking.list_tasks)
    acancel_task = _awaited(Tracking.cancel_task)
    aretry_task = _awaited(Tracking.retry_task)
    aupdate_task = _awaited(Tracking.update_task)
    apause_task = _awaited(Tracking.pause_task)
    aresume_task = _awaited(Tracking.resume_task)
    astop_job = _awaited(Tracking.stop_job)
    aresume_job = _awaited(Tracking.resume_job)

    async def aclose(self) -> None:
        """Close its connections (the client's, and the engines')."""
        await greenlet_spawn(self.tracking.client.close)
        if self._redis is not None:
            await greenlet_spawn(self._redis.close)
        if self._broker_database is not None:
            await self._broker_database.dispose()
        await self.database.dispose()


_defaults = PerLoop(AsyncTracking)


def default_async_tracking() -> AsyncTracking:
    """The ``AsyncTracking`` of the running loop (see ``async_client.PerLoop``)."""
    return _defaults.get()


def _on_default(
    call: Callable[Concatenate[AsyncTracking, P], Coroutine[Any, Any, R]],
) -> Callable[P, Coroutine[Any, Any, R]]:
    async def on_default(*args: P.args, **kwargs: P.kwargs) -> R:
        return await call(default_async_tracking(), *args, **kwargs)

    return named_like(on_default, call.__name__, call, bound=True)


acreate_task = _on_default(AsyncTracking.acreate_task)
achain = _on_default(AsyncTracking.achain)
aget_task = _on_default(AsyncTracking.aget_task)
alist_events = _on_default(AsyncTracking.alist_events)
alist_failed_items = _on_default(AsyncTracking.alist_failed_items)
alist_tasks = _on_default(AsyncTracking.alist_tasks)
acancel_task = _on_default(AsyncTracking.acancel_task)
aretry_task = _on_default(AsyncTracking.aretry_task)
aupdate_task = _on_default(AsyncTracking.aupdate_task)
apause_task = _on_default(AsyncTracking.apause_task)
aresume_task = _on_default(AsyncTracking.aresume_task)
astop_job = _on_default(AsyncTracking.astop_job)
aresume_job = _on_default(AsyncTracking.aresume_job)
