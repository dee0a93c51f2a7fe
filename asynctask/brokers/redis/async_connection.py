"""redis-py's asyncio client, as ``connection.connect`` makes the sync one: of one server or of
the master a ``redis+sentinel://`` URL names, its writes waiting for replicas when asked.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio
import redis.asyncio.client
import redis.asyncio.sentinel

from asynctask.brokers.redis import sentinel
from asynctask.brokers.redis.replicas import check, wait_command, writes


def connect_async(url: str, *, replicas: int = 0, **settings: Any) -> redis.asyncio.Redis:
    """An asyncio client for ``url``, its connections made with ``settings``; with
    ``replicas``, each write waits for that many replicas."""
    redis_class = ReplicatedAsyncRedis if replicas else redis.asyncio.Redis
    client: redis.asyncio.Redis
    if sentinel.is_sentinel_url(url):
        parsed = sentinel.parse(url)
        manager = AsyncSentinels(parsed)
        client = manager.master_for(
            parsed.service,
            redis_class=redis_class,
            connection_pool_class=AsyncSentinelPool,
            **parsed.master_settings(),
            **settings,
        )
    else:
        client = redis_class.from_url(url, **settings)
    if isinstance(client, ReplicatedAsyncRedis):
        client.min_replicas = replicas
    return client


class AsyncSentinels(redis.asyncio.sentinel.Sentinel):
    """``sentinel.Sentinels`` for redis-py's asyncio client."""

    def __init__(self, parsed: sentinel.SentinelURL) -> None:
        super().__init__(list(parsed.sentinels), sentinel_kwargs=parsed.sentinel_settings())  # type: ignore[no-untyped-call]
        self.moves = sentinel.MasterMoves(parsed.service)
        self.parsed = parsed

    async def discover_master(self, service_name: str) -> tuple[str, int]:
        try:
            address: tuple[str, int] = await super().discover_master(service_name)
        except redis.asyncio.sentinel.MasterNotFoundError as exc:
            raise sentinel.no_master(self.parsed) from exc
        self.moves.found(address)
        return address


class AsyncSentinelPool(redis.asyncio.sentinel.SentinelConnectionPool):
    """``sentinel.SentinelPool`` for redis-py's asyncio client."""

    async def disconnect(self, inuse_connections: bool = True) -> None:
        await super().disconnect(inuse_connections)
        if inuse_connections:
            for node in self.sentinel_manager.sentinels:
                await node.aclose()


def min_replicas(client: redis.asyncio.Redis) -> int:
    """How many replicas ``client``'s writes wait for (0: none)."""
    return client.min_replicas if isinstance(client, ReplicatedAsyncRedis) else 0


class ReplicatedAsyncRedis(redis.asyncio.Redis):
    """``replicas.ReplicatedRedis`` for redis-py's asyncio client."""

    min_replicas = 1

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        if not writes(args[0]):
            return await super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
        pipe = self.pipeline(transaction=False)
        pipe.execute_command(*args, **options)
        return (await pipe.execute())[0]

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> ReplicatedAsyncPipeline:
        pipe = ReplicatedAsyncPipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)
        pipe.min_replicas = self.min_replicas
        return pipe


class ReplicatedAsyncPipeline(redis.asyncio.client.Pipeline):
    min_replicas = 1

    async def _execute_pipeline(self, connection: Any, commands: Any, raise_on_error: bool) -> list[Any]:
        if not any(writes(args[0]) for args, _ in commands):
            return await super()._execute_pipeline(connection, commands, raise_on_error)  # type: ignore[no-any-return]
        waited = [*commands, (wait_command(self.min_replicas), {})]
        replies = await super()._execute_pipeline(connection, waited, raise_on_error)
        check(replies.pop(), self.min_replicas)
        return replies  # type: ignore[no-any-return]

    async def _execute_transaction(self, connection: Any, commands: Any, raise_on_error: bool) -> list[Any]:
        replies = await super()._execute_transaction(connection, commands, raise_on_error)
        await connection.send_command(*wait_command(self.min_replicas))
        check(await connection.read_response(), self.min_replicas)
        return replies  # type: ignore[no-any-return]
