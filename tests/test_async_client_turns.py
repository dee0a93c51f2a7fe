"""Coroutines pushing at once prepare their pushes a few per turn of the event loop, so that a
thousand of them never hold the loop for all of theirs in one turn."""

from __future__ import annotations

import asyncio
from collections import Counter

from asynctask import AsyncClient, Settings
from asynctask.async_client import PUSHES_PER_TURN
from tests.conftest import REDIS_URL


def test_pushes_are_prepared_at_most_a_few_per_turn_of_the_loop() -> None:
    async def main() -> Counter[int]:
        # No push is made: only the turns are taken (the client connects at its first push).
        client = AsyncClient(Settings(redis_url=REDIS_URL))
        loop = asyncio.get_running_loop()
        turn = 0

        def count_turns() -> None:
            nonlocal turn
            turn += 1
            loop.call_soon(count_turns)

        loop.call_soon(count_turns)
        prepared: Counter[int] = Counter()

        async def push() -> None:
            await client._turn()
            prepared[turn] += 1

        await asyncio.gather(*(push() for _ in range(500)))
        await client.aclose()
        return prepared

    prepared = asyncio.run(main())
    assert sum(prepared.values()) == 500
    assert max(prepared.values()) <= PUSHES_PER_TURN
    assert len(prepared) >= 500 // PUSHES_PER_TURN
