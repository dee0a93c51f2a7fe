"""Pushing jobs from an event loop, on redis-py's asyncio client: the commands and scripts of
``push.plan_push``, awaited.

Pushes of plain jobs (no flow key, nothing tracked) made side by side share one write and its
replies (``SharedTrips``), each push getting its own outcome.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Sequence
from typing import Any

import hiredis
import redis
import redis.asyncio

from asynctask import payload
from asynctask.brokers.redis.async_connection import connect_async, min_replicas
from asynctask.brokers.redis.connection import CONNECT_TIMEOUT, READ_SIZE, REPLY_MARGIN, Replies
from asynctask.brokers.redis.push import Command, ScriptCall, plan_push
from asynctask.brokers.redis.replicas import check, wait_command
from asynctask.brokers.redis.scripts import script_source
from asynctask.brokers.shared_trips import Outcome, SharedTrips
from asynctask.keys import Keys
from asynctask.settings import Settings


class AsyncRedisPusher:
    def __init__(self, settings: Settings) -> None:
        self.redis = connect_async(
            settings.broker,
            replicas=settings.redis_min_replicas,
            socket_connect_timeout=CONNECT_TIMEOUT,
            socket_timeout=REPLY_MARGIN,
            socket_keepalive=True,
            # Named as the process's other connections are (``CLIENT LIST`` shows who is who).
            client_name=f"asynctask:{socket.gethostname()}:{os.getpid()}",
        )
        self.keys = Keys(settings.namespace)
        self.max_payload_bytes = settings.max_payload_bytes
        self._scripts = {name: self.redis.register_script(script_source(name)) for name in ("record", "push")}
        replicas = min_replicas(self.redis)
        self._plain = (
            AsyncReplicatedRoundTrips(self.redis, replicas) if replicas else AsyncPlainRoundTrips(self.redis)
        )
        self._shared = SharedTrips(self._send_plain)

    async def push(self, entries: payload.PushEntries, *, transitions: Sequence[str] = ()) -> list[str]:
        """``RedisBroker.push``, awaited: the jid the store holds for each entry."""
        plan = plan_push(self.keys, entries, self.max_payload_bytes, transitions=transitions)
        if plan.plain is not None:
            await self._shared.join(plan.plain)
            return plan.jids
        pipe = self.redis.pipeline(transaction=False)
        for step in plan.steps:
            if isinstance(step, ScriptCall):
                script = self._scripts[step.name]
                # Loaded, if the server lacks it, before the pipeline runs (redis-py's stub types
                # the set as the sync client's scripts).
                pipe.scripts.add(script)  # type: ignore[arg-type]
                pipe.evalsha(script.sha, len(step.keys), *step.keys, *step.args)
            else:
                pipe.execute_command(*step)
        return plan.holders(await pipe.execute())

    async def close(self) -> None:
        await self._shared.close()
        await self._plain.close()
        await self.redis.aclose()

    async def _send_plain(self, pushes: list[list[Command]]) -> list[Outcome]:
        """Plain pushes' commands in one write: each push fails with its first error reply."""
        replies = await self._plain.send([command for commands in pushes for command in commands])
        outcomes: list[Outcome] = []
        offset = 0
        for commands in pushes:
            mine = replies[offset : offset + len(commands)]
            offset += len(commands)
            outcomes.append(next((reply for reply in mine if isinstance(reply, Exception)), None))
        return outcomes


class AsyncPlainRoundTrips:
    """Plain commands sent in one write and their replies read, on connections of their own:
    ``connection.PlainRoundTrips`` for an event loop.

    redis-py's asyncio pipeline packs each command in Python and reads each reply under a
    timer of its own, most of a plain push's cost: here hiredis packs them all and parses the
    replies, and one timer bounds each read of the socket. The connections are redis-py's own
    (made by the client's pool, so they connect, authenticate and select the database as it
    does), outside the pool's count, at most as many as sends in flight at once. A connection
    the server closed while it was idle is connected again before anything is sent on it, and
    one that failed half-way is dropped: none ever holds a reply that is not its caller's.
    """

    def __init__(self, client: redis.asyncio.Redis) -> None:
        self._pool = client.connection_pool
        self._timeout = self._pool.connection_kwargs.get("socket_timeout") or REPLY_MARGIN
        self._idle: list[Any] = []

    async def send(self, commands: Sequence[Command]) -> list[Any]:
        """The replies of ``commands``, error replies as redis-py's exceptions (not raised)."""
        try:
            connection = self._idle.pop()
        except IndexError:
            connection = self._pool.make_connection()  # type: ignore[no-untyped-call]
        # hiredis's stub types a command as a tuple of one argument.
        packed = b"".join([hiredis.pack_command(command) for command in commands])  # type: ignore[arg-type]
        try:
            replies = await self._exchange(connection, packed, len(commands))
        except BaseException:
            await connection.disconnect()
            raise
        self._idle.append(connection)
        return replies

    async def _exchange(self, connection: Any, packed: bytes, count: int) -> list[Any]:
        if not connection.is_connected or connection._reader.at_eof():
            # Closed by the server while idle (the loop has read its end of file): never sent on.
            await connection.disconnect()
            await connection.connect()
        connection._writer.write(packed)
        replies = Replies(count)
        try:
            async with asyncio.timeout(self._timeout):
                await connection._writer.drain()
                while not replies.complete():
                    replies.feed(await connection._reader.read(READ_SIZE))
        except TimeoutError as exc:
            raise redis.TimeoutError(f"Timeout reading from {connection!r}") from exc
        except OSError as exc:
            raise redis.ConnectionError(f"Error talking to {connection!r}: {exc}") from exc
        return replies.replies

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for connection in idle:
            await connection.disconnect()


class AsyncReplicatedRoundTrips(AsyncPlainRoundTrips):
    """``AsyncPlainRoundTrips`` whose writes wait for replicas (``replicas``): WAIT goes last in
    the same write; too few replicas raise ``replicas.FewerReplicas`` for the whole send."""

    def __init__(self, client: redis.asyncio.Redis, replicas: int) -> None:
        super().__init__(client)
        self._wait = wait_command(replicas)

    async def send(self, commands: Sequence[Command]) -> list[Any]:
        replies = await super().send([*commands, self._wait])
        check(replies.pop(), self._wait[1])
        return replies
