"""The client for code on an event loop: ``await job.aperform_async(...)``, ``aperform_in``,
``aperform_at``, ``aperform_bulk``, or an ``AsyncClient`` of one's own.

The same checks, middleware and payloads as ``Client`` (the client middleware runs on the
loop: it must not block), and the same all-or-nothing per round trip, awaited on an asyncio
driver: redis-py's asyncio client on Redis; SQLAlchemy's asyncio extension on SQL (psycopg's
async mode for PostgreSQL, aiosqlite for SQLite).

A client belongs to the event loop it was first used on, as its connections do: the default
one (``default_async_client``) is one per loop.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from collections.abc import AsyncGenerator, Mapping, Sequence
from inspect import Signature
from typing import Any, Generic, Protocol, TypeVar

from asynctask import payload
from asynctask.client import bulk_batches, template, through
from asynctask.flow.options import FlowOptions
from asynctask.middleware import Chain, client_chain
from asynctask.registry import Registry, default_registry
from asynctask.settings import Settings

#: Pushes prepared in one turn of the loop at most: under a millisecond of work, so that the
#: loop, with the replies it resumes, turns in about 2 ms.
PUSHES_PER_TURN = 10


class AsyncPusher(Protocol):
    """What a broker offers an event loop: ``Broker.push``, awaited."""

    async def push(self, entries: payload.PushEntries, *, transitions: Sequence[str] = ()) -> list[str]: ...

    async def close(self) -> None: ...


class AsyncClient:
    """Pushes jobs from an event loop; many coroutines may share one."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        middleware: Chain[payload.JobDict] | None = None,
        registry: Registry | None = None,
    ) -> None:
        self.settings = settings or Settings.from_env()
        self.middleware = client_chain if middleware is None else middleware
        self.registry = default_registry if registry is None else registry
        self.pusher = _open_pusher(self.settings)
        #: Pushes prepared in this turn of the loop, and those waiting for a later turn.
        self._this_turn = 0
        self._next_turns: deque[asyncio.Future[None]] = deque()

    def turn(self) -> asyncio.Future[None] | None:
        """What to wait for until this turn of the loop has room for one more push's
        preparation (None: it has room now). A thousand coroutines pushing at once would
        otherwise each prepare theirs in one turn, and hold the loop for all of them."""
        if self._this_turn == 0:
            asyncio.get_running_loop().call_soon(self._next_turn)
        if self._this_turn < PUSHES_PER_TURN and not self._next_turns:
            self._this_turn += 1
            return None
        turn = asyncio.get_running_loop().create_future()
        self._next_turns.append(turn)
        return turn

    def _next_turn(self) -> None:
        self._this_turn = 0
        waiting = self._next_turns
        while waiting and self._this_turn < PUSHES_PER_TURN:
            turn = waiting.popleft()
            if not turn.done():
                turn.set_result(None)
                self._this_turn += 1
        if waiting or self._this_turn:
            asyncio.get_running_loop().call_soon(self._next_turn)

    async def aclose(self) -> None:
        await self.pusher.close()

    async def apush(
        self, item: Mapping[str, Any], *, flow: FlowOptions | None = None, signature: Signature | None = None
    ) -> str | None:
        """``Client.push``, awaited, once this turn of the loop has room for it (``turn``)."""
        turn = self.turn()
        if turn is not None:
            await turn
        return await self.apush_in_turn(item, flow=flow, signature=signature)

    async def apush_in_turn(
        self, item: Mapping[str, Any], *, flow: FlowOptions | None = None, signature: Signature | None = None
    ) -> str | None:
        """``apush`` from a coroutine whose turn it is: one that waited for ``turn()`` before it
        made ``item``, so that coroutines started together each do next to nothing in their
        first step."""
        normalized = template(item, self.registry, flow=flow, signature=signature)
        passed = through(normalized, normalized.job, self.middleware)
        if passed is None:
            return None
        pushed, transitions = passed
        return (await self.pusher.push([(pushed, normalized.at)], transitions=transitions))[0]

    async def apush_bulk(
        self,
        item: Mapping[str, Any],
        batch_size: int = 1000,
        *,
        flow: FlowOptions | None = None,
        signature: Signature | None = None,
    ) -> list[str | None]:
        """``Client.push_bulk``, awaited: one round trip per ``batch_size`` jobs."""
        jids: list[str | None] = []
        for batch in bulk_batches(
            item, batch_size, self.registry, self.middleware, jids, flow=flow, signature=signature
        ):
            if batch is None:
                # Preparing a big batch would hold the loop: other coroutines run meanwhile.
                await asyncio.sleep(0)
                continue
            entries, transitions, positions = batch
            stored = await self.pusher.push(entries, transitions=transitions)
            for position, jid in zip(positions, stored, strict=True):
                jids[position] = jid
        return jids


def _open_pusher(settings: Settings) -> AsyncPusher:
    if settings.uses_redis:
        from asynctask.brokers.redis.async_push import AsyncRedisPusher

        return AsyncRedisPusher(settings)
    from asynctask.brokers.sql.async_push import AsyncSqlPusher

    return AsyncSqlPusher(settings)


class Configured(Protocol):
    """What ``PerLoop`` makes: something made from settings, client middleware and a registry."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        middleware: Chain[payload.JobDict] | None = None,
        registry: Registry | None = None,
    ) -> None: ...

    async def aclose(self) -> None: ...


C = TypeVar("C", bound=Configured)


class PerLoop(Generic[C]):
    """One ``C`` per event loop (its connections belong to the loop), made on the loop's first
    ``get``: with the settings, middleware and registry of the default client when
    ``configure()`` set one, else from the environment."""

    def __init__(self, make: type[C]) -> None:
        self._make = make
        #: What each loop got, and what closes it when the loop shuts down.
        self._made: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[C, AsyncGenerator[None]]] = (
            weakref.WeakKeyDictionary()
        )

    def get(self) -> C:
        loop = asyncio.get_running_loop()
        entry = self._made.get(loop)
        if entry is not None:
            return entry[0]
        from asynctask import client as sync_client

        configured = sync_client.configured()
        if configured is None:
            made = self._make()
        else:
            made = self._make(
                configured.settings, middleware=configured.middleware, registry=configured.registry
            )
        self._made[loop] = (made, self._closed_at_shutdown(loop, made))
        return made

    def _closed_at_shutdown(self, loop: asyncio.AbstractEventLoop, made: C) -> AsyncGenerator[None]:
        """A generator suspended on ``loop`` until the loop shuts down, then closing ``made`` and
        forgetting it: ``asyncio.run`` (and any runner) closes the async generators still
        suspended on its loop before it closes the loop, and nobody else knows when a loop's
        life ends. The loop holds it weakly, and it holds the loop: this object keeps it until
        then, and lets both go after."""

        async def closing() -> AsyncGenerator[None]:
            try:
                yield
            finally:
                try:
                    await made.aclose()
                finally:
                    self._made.pop(loop, None)

        return _started(closing())


def _started(generator: AsyncGenerator[None]) -> AsyncGenerator[None]:
    """``generator``, run to its first yield: that registers it with the running loop."""
    # Stepped by hand (it awaits nothing before its yield), from a caller that cannot await.
    first = generator.asend(None)
    try:
        first.send(None)
    except StopIteration:
        pass
    return generator


_defaults = PerLoop(AsyncClient)


def default_async_client() -> AsyncClient:
    """The client ``aperform_async`` uses on the running loop (see ``PerLoop``)."""
    return _defaults.get()
