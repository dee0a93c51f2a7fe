"""Writes that wait for replicas (``redis_min_replicas``): each command or pipeline that may
write is followed, on the same connection, by ``WAIT n timeout``.

Redis replicates asynchronously: a write the master acknowledged may be missing from the
replica a failover promotes. WAIT returns once ``n`` replicas hold every write the connection
made, or at its timeout with how many do; fewer than ``n`` fails the call (``FewerReplicas``), so
that a push that might not survive a failover is reported to its caller instead of looking done.

A pipeline's WAIT is sent with its commands, in the same round trip; a MULTI/EXEC pipeline's
needs one more (Redis does not wait inside a transaction). Commands that only read go as they
are. The asyncio client's twins are in ``async_connection``, so that a process that never
awaits does not load redis-py's asyncio client.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
import redis.client

#: Milliseconds WAIT gives the replicas before the write is reported as not replicated.
WAIT_MS = 2000

#: Commands that never write: no WAIT after them.
READS = frozenset(
    {
        "CLIENT", "DBSIZE", "ECHO", "EXISTS", "GET", "HEXISTS", "HGET", "HGETALL", "HKEYS",
        "HLEN", "HMGET", "HSCAN", "INFO", "LINDEX", "LLEN", "LPOS", "LRANGE", "MGET", "PING",
        "PTTL", "SCAN", "SCARD", "SCRIPT", "SISMEMBER", "SMEMBERS", "SSCAN", "STRLEN", "TIME",
        "TTL", "TYPE", "WAIT", "XINFO", "XLEN", "XRANGE", "XREVRANGE", "ZCARD", "ZCOUNT",
        "ZMSCORE", "ZRANGE", "ZRANGEBYSCORE", "ZRANK", "ZREVRANGE", "ZREVRANGEBYSCORE",
        "ZSCAN", "ZSCORE",
    }
)  # fmt: skip


class FewerReplicas(redis.RedisError):
    """A write reached fewer replicas than ``redis_min_replicas`` within ``WAIT_MS``: it is
    on the master, and a failover now could lose it."""


def wait_command(replicas: int) -> tuple[str, int, int]:
    return ("WAIT", replicas, WAIT_MS)


def check(reached: object, replicas: int) -> None:
    """Raise unless WAIT's reply says ``replicas`` replicas hold the writes."""
    if isinstance(reached, Exception):
        raise reached
    if not isinstance(reached, int) or reached < replicas:
        raise FewerReplicas(
            f"a write reached {reached} replica(s) within {WAIT_MS} ms; redis_min_replicas is {replicas}"
        )


def writes(command: object) -> bool:
    name = command.decode() if isinstance(command, bytes) else str(command)
    # redis-py names subcommands with their command: "SCRIPT LOAD", "CLIENT SETNAME".
    return name.partition(" ")[0].upper() not in READS


def min_replicas(client: redis.Redis) -> int:
    """How many replicas ``client``'s writes wait for (0: none)."""
    return client.min_replicas if isinstance(client, ReplicatedRedis) else 0


class ReplicatedRedis(redis.Redis):
    """A client whose every write waits for ``min_replicas`` replicas."""

    min_replicas = 1

    def execute_command(self, *args: Any, **options: Any) -> Any:
        if not writes(args[0]):
            return super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
        pipe = self.pipeline(transaction=False)
        pipe.execute_command(*args, **options)  # type: ignore[no-untyped-call]
        return pipe.execute()[0]

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> ReplicatedPipeline:
        pipe = ReplicatedPipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)
        pipe.min_replicas = self.min_replicas
        return pipe


class ReplicatedPipeline(redis.client.Pipeline):
    min_replicas = 1

    def _execute_pipeline(self, connection: Any, commands: Sequence[Any], raise_on_error: bool) -> list[Any]:
        if not any(writes(args[0]) for args, _ in commands):
            return super()._execute_pipeline(connection, commands, raise_on_error)  # type: ignore[no-any-return,no-untyped-call]
        replies: list[Any] = super()._execute_pipeline(  # type: ignore[no-untyped-call]
            connection, [*commands, (wait_command(self.min_replicas), {})], raise_on_error
        )
        check(replies.pop(), self.min_replicas)
        return replies

    def _execute_transaction(
        self, connection: Any, commands: Sequence[Any], raise_on_error: bool
    ) -> list[Any]:
        replies = super()._execute_transaction(connection, commands, raise_on_error)
        connection.send_command(*wait_command(self.min_replicas))
        check(connection.read_response(), self.min_replicas)
        return replies
