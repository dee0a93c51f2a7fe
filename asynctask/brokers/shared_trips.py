"""Round trips that the coroutines of one event loop share: what they hand in goes out together
in the next trip, and each of them gets its own outcome.

A trip sets off at the loop's next turn, unless ``TRIPS_AT_ONCE`` are under way: what is handed
in meanwhile waits for one of them to end, as a database's group commit does. A thousand
coroutines pushing side by side then cost a round trip per trip, not one each, and the loop
resumes them from a single reply.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")

#: What a trip says of each of its items: None when it went through, else why not.
Outcome = BaseException | None

#: Items in one trip at most, and trips under way at once (one fills while another is on the
#: wire). The coroutines of a trip are resumed together once their items are freed, and make their
#: next pushes at once: past the young generation's threshold of Python's garbage collector (700
#: objects), the pushes of two trips set off a collection that keeps every push under way for an
#: older generation, and every few trips a full collection of the process holds the loop 10 to 60
#: ms. Two trips of 30 pushes stay under it; of 50 they crossed it at times, of 200 always.
MOST_PER_TRIP = 30
TRIPS_AT_ONCE = 2


class SharedTrips(Generic[T]):
    """Sends the items handed in during one turn of the loop with ``send``, which returns an
    outcome per item (in their order) or raises for all of them."""

    def __init__(
        self,
        send: Callable[[list[T]], Awaitable[list[Outcome]]],
        most: int = MOST_PER_TRIP,
        at_once: int = TRIPS_AT_ONCE,
    ) -> None:
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
        """Set off the waiting items at the loop's next turn (``_set_off`` starts what may)."""
        if self._waiting and not self._set_off_soon:
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
