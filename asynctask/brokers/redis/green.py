"""redis-py's client, its commands sent on redis-py's asyncio client: the broker's code as it
is, run by an event loop's coroutine without a thread.

``GreenRedis`` is a ``redis.Redis`` whose every command, pipeline and script call awaits the
asyncio client, through SQLAlchemy's greenlet bridge (``await_only``): the call must be made
in a greenlet that SQLAlchemy spawned for a coroutine (``greenlet_spawn``, as its asyncio
extension runs a sync ``Session``), where the loop runs other coroutines while a reply is on
its way. Called anywhere else, a command raises ``MissingGreenlet`` rather than block.
"""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio
from redis.client import Pipeline
from sqlalchemy.util import await_only

from asynctask.brokers.redis import sentinel
from asynctask.brokers.redis.async_connection import connect_async
from asynctask.brokers.redis.connection import CONNECT_TIMEOUT, REPLY_MARGIN


class GreenRedis(redis.Redis):
    def __init__(self, url: str, *, replicas: int = 0) -> None:
        # The sync pool only holds the URL's settings: a caller that would make a connection
        # of its own from it (``PlainRoundTrips``) would block the loop, and fails instead.
        super().__init__(
            connection_pool=redis.ConnectionPool(connection_class=NoBlockingConnection)
            if sentinel.is_sentinel_url(url)
            else redis.ConnectionPool.from_url(url, connection_class=NoBlockingConnection)
        )
        self.awaited = connect_async(
            url,
            replicas=replicas,
            socket_connect_timeout=CONNECT_TIMEOUT,
            socket_timeout=REPLY_MARGIN,
            socket_keepalive=True,
        )

    def execute_command(self, *args: Any, **options: Any) -> Any:
        return await_only(self.awaited.execute_command(*args, **options))  # type: ignore[no-untyped-call]

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> GreenPipeline:
        return GreenPipeline(self, transaction)

    def close(self) -> None:
        await_only(self.awaited.aclose())
        super().close()


class NoBlockingConnection:
    """The connection a ``GreenRedis``'s sync pool makes: none."""

    def __init__(self, **_settings: Any) -> None:
        raise RuntimeError("a blocking Redis connection was asked for by a call awaited on an event loop")


class GreenPipeline(Pipeline):
    """Commands stacked as redis-py's pipeline stacks them, sent by the asyncio client's."""

    def __init__(self, client: GreenRedis, transaction: bool) -> None:
        super().__init__(client.connection_pool, client.response_callbacks, transaction, None)
        self.green = client
        #: MULTI/EXEC around the commands (redis-py's stub types ``transaction`` as its method).
        self.atomic = transaction

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        stack = self.command_stack
        if not stack:
            return []
        awaited = self.green.awaited.pipeline(transaction=self.atomic)
        for args, options in stack:
            awaited.execute_command(*args, **options)
        # A script of the stack is loaded first if the server lacks it, as redis-py's own
        # pipeline does (both read only the script's ``sha`` and ``script``).
        awaited.scripts.update(self.scripts)
        try:
            return list(await_only(awaited.execute(raise_on_error)))
        finally:
            self.reset()
