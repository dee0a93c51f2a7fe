"""Round trips shared by the coroutines of one loop: fuller trips while others are under way,
and an outcome for each item."""

from __future__ import annotations

import asyncio

import pytest

from asynctask.brokers.shared_trips import Outcome, SharedTrips


class Trips:
    """A ``send`` that records each trip's items and holds them until ``release``d; an item
    that is an exception is that item's outcome."""

    def __init__(self) -> None:
        self.sent: list[list[object]] = []
        self.released = asyncio.Event()

    async def send(self, items: list[object]) -> list[Outcome]:
        self.sent.append(items)
        await self.released.wait()
        return [item if isinstance(item, BaseException) else None for item in items]


def test_items_handed_in_while_a_trip_is_under_way_go_together_in_the_next_ones() -> None:
    async def main() -> list[list[object]]:
        trips = Trips()
        shared = SharedTrips(trips.send, most=3, at_once=1)
        first = [shared.join(n) for n in range(2)]
        await asyncio.sleep(0)
        later = [shared.join(n) for n in range(2, 9)]
        for _ in range(3):
            await asyncio.sleep(0)
        assert trips.sent == [[0, 1]], "a second trip set off while the first was under way"
        trips.released.set()
        await asyncio.gather(*first, *later)
        return trips.sent

    assert asyncio.run(main()) == [[0, 1], [2, 3, 4], [5, 6, 7], [8]]


def test_trips_under_way_at_once_are_bounded() -> None:
    async def main() -> list[list[object]]:
        trips = Trips()
        shared = SharedTrips(trips.send, most=2, at_once=2)
        joined = [shared.join(n) for n in range(7)]
        for _ in range(3):
            await asyncio.sleep(0)
        assert trips.sent == [[0, 1], [2, 3]]
        trips.released.set()
        await shared.close()
        assert all(done.done() for done in joined)
        return trips.sent

    assert asyncio.run(main()) == [[0, 1], [2, 3], [4, 5], [6]]


def test_each_item_gets_its_own_outcome_and_a_failed_trip_fails_each_of_its_items() -> None:
    refused = ValueError("refused")

    async def main() -> None:
        trips = Trips()
        trips.released.set()
        shared = SharedTrips(trips.send, most=10, at_once=1)
        outcomes = await asyncio.gather(
            *(shared.join(item) for item in (1, refused, 3)), return_exceptions=True
        )
        assert outcomes == [None, refused, None]

        async def broken(items: list[object]) -> list[Outcome]:
            raise ConnectionError("gone")

        failing = SharedTrips(broken, most=10, at_once=1)
        failed = await asyncio.gather(failing.join(1), failing.join(2), return_exceptions=True)
        assert [type(outcome) for outcome in failed] == [ConnectionError, ConnectionError]

    asyncio.run(main())


def test_a_caller_cancelled_while_its_trip_is_under_way_leaves_the_others_theirs() -> None:
    async def main() -> None:
        trips = Trips()
        shared = SharedTrips(trips.send, most=10, at_once=1)
        gone, kept = shared.join(1), shared.join(2)
        await asyncio.sleep(0)
        gone.cancel()
        trips.released.set()
        await kept
        assert kept.exception() is None
        with pytest.raises(asyncio.CancelledError):
            await gone

    asyncio.run(main())


def test_closing_waits_for_items_handed_in_before_any_trip_set_off() -> None:
    async def main() -> list[list[object]]:
        trips = Trips()
        trips.released.set()
        shared = SharedTrips(trips.send, most=10, at_once=1)
        joined = shared.join(1)
        await shared.close()
        assert joined.done()
        return trips.sent

    assert asyncio.run(main()) == [[1]]
