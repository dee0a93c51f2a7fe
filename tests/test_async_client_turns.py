"""Coroutines pushing at once prepare their pushes a few per turn of the event loop, so that a
thousand of them never hold the loop for all of theirs in one turn."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from asynctask import AsyncClient, Registry, Settings, job, payload
from asynctask.async_client import PUSHES_PER_TURN
from asynctask.job import JobSetter
from asynctask.middleware import Chain
from tests.conftest import REDIS_URL


class Turns:
    """The running loop's turns, counted from ``Turns()``: ``now`` is the current one."""

    def __init__(self) -> None:
        self.now = 0
        self._loop = asyncio.get_running_loop()
        self._loop.call_soon(self._next)

    def _next(self) -> None:
        self.now += 1
        self._loop.call_soon(self._next)


def test_pushes_are_prepared_at_most_a_few_per_turn_of_the_loop() -> None:
    async def main() -> Counter[int]:
        # No push is made: only the turns are taken (the client connects at its first push).
        client = AsyncClient(Settings(redis_url=REDIS_URL))
        turns = Turns()
        prepared: Counter[int] = Counter()

        async def push() -> None:
            wait = client.turn()
            if wait is not None:
                await wait
            prepared[turns.now] += 1

        await asyncio.gather(*(push() for _ in range(500)))
        await client.aclose()
        return prepared

    prepared = asyncio.run(main())
    assert sum(prepared.values()) == 500
    assert max(prepared.values()) <= PUSHES_PER_TURN
    assert len(prepared) >= 500 // PUSHES_PER_TURN


def test_a_job_pushed_from_many_coroutines_is_made_in_its_turn_not_in_their_first_step(
    redis_settings: Settings, registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    @job(registry=registry, queue="turns")
    def note(n: int) -> None:
        pass

    made_in: Counter[int] = Counter()
    make = JobSetter._item

    async def main() -> None:
        client = AsyncClient(redis_settings, registry=registry, middleware=Chain())
        turns = Turns()

        def made(setter: JobSetter, args: list[Any], at: float | None) -> payload.JobDict:
            made_in[turns.now] += 1
            return make(setter, args, at)

        monkeypatch.setattr(JobSetter, "_item", made)
        pushing = note.set(client=client)
        await asyncio.gather(*(pushing.aperform_async(n) for n in range(500)))
        await client.aclose()

    asyncio.run(main())
    assert sum(made_in.values()) == 500
    # The first step of each coroutine only waits: made all in it, the five hundred would be
    # in one turn.
    assert max(made_in.values()) <= PUSHES_PER_TURN
