"""Round trips that the coroutines of one event loop share: what they hand in during one turn
of the loop goes out together at the start of the next, and each of them gets its own outcome.

A thousand coroutines pushing side by side then cost one round trip per turn, not one each,
and the loop resumes them from a single reply. A trip takes at most ``most`` items, so that
packing them, and resuming their coroutines, never holds the loop for long; and at most
``at_once`` trips are under way: what is handed in meanwhile waits for the next one, as a
database's group commit does, so that a busy loop makes fewer, fuller trips.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")

#: What a trip says of each of its items: None when it went through, else why not.
Outcome = BaseException | None


class SharedTrips(Generic[T]):
    """Sends the items handed in during one turn of the loop with ``send``, which returns an
    outcome per item (in their order) or raises for all of them."""

    def __init__(self, send: Callable[[list[T]], Awaitable[list[Outcome]]], most: int, at_once: int) -> None:
        self._send = send
        self._most = most
        self._at_once = at_once
        #: The items waiting for a trip, each with the future its coroutine awaits.
        self._waiting: list[tuple[T, asyncio.Future[None]]] = []
        self._trips: set[asyncio.Task[None]] = set()
        self._set_off_soon = False

    def join(self, item: T) -> asyncio.Future[None]:
        """A future done once ``item`` went out with the others of this turn (its error if it
        failed). A future rather than a coroutine: each waiting caller holds one object less."""
        done = asyncio.get_running_loop().create_future()
        self._waiting.append((item, done))
        self._schedule()
        return done

    async def close(self) -> None:
        """Wait until every item handed in went out."""
        while self._trips or self._waiting:
            if self._trips:
                await asyncio.wait(set(self._trips))
            else:
                await asyncio.sleep(0)

    def _schedule(self) -> None:
        """Set off the waiting items at the loop's next turn, if a trip can start."""
        if self._waiting and not self._set_off_soon and len(self._trips) < self._at_once:
            self._set_off_soon = True
            asyncio.get_running_loop().call_soon(self._set_off)

    def _set_off(self) -> None:
        self._set_off_soon = False
        loop = asyncio.get_running_loop()
        while self._waiting and len(self._trips) < self._at_once:
            items, self._waiting = self._waiting[: self._most], self._waiting[self._most :]
            trip = loop.create_task(self._trip(items))
            self._trips.add(trip)
            trip.add_done_callback(self._ended)

    def _ended(self, trip: asyncio.Task[None]) -> None:
        self._trips.discard(trip)
        self._schedule()

    async def _trip(self, waiting: list[tuple[T, asyncio.Future[None]]]) -> None:
        try:
            outcomes = await self._send([item for item, _ in waiting])
        except BaseException as exc:
            for _, done in waiting:
                if not done.done():
                    done.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for (_, done), outcome in zip(waiting, outcomes, strict=True):
            # Its coroutine may have been cancelled meanwhile.
            if done.done():
                continue
            if outcome is None:
                done.set_result(None)
            else:
                done.set_exception(outcome)
