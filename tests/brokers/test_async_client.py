"""The asyncio client on every backend: ``aperform_*`` push what ``perform_*`` push (queued,
scheduled, in bulk, tracked, unique), from many coroutines at once on one loop."""

from __future__ import annotations

import asyncio
import gc
import os
import socket
import time
import warnings
import weakref
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import redis
from sqlalchemy import Engine, event, select
from sqlalchemy.exc import DataError
from sqlalchemy.ext.asyncio import AsyncEngine

import asynctask
from asynctask import AsyncClient, Client, JobDefinition, Registry, Settings
from asynctask import client as client_module
from asynctask.api import Queue, ScheduledSet
from asynctask.async_client import default_async_client
from asynctask.middleware import Chain, TrackingClientMiddleware, TrackingServerMiddleware
from asynctask.tracking.models import Event
from asynctask.worker import Worker
from tests.conftest import wait_until

StartWorker = Callable[..., Worker]


def run(
    coroutine_function: Callable[[AsyncClient], Any], settings: Settings, registry: Registry, **kwargs: Any
) -> Any:
    """Run ``coroutine_function(client)`` on a fresh loop with a client of its own."""

    async def main() -> Any:
        client = AsyncClient(settings, registry=registry, middleware=kwargs.get("middleware", Chain()))
        try:
            return await coroutine_function(client)
        finally:
            await client.aclose()

    return asyncio.run(main())


def test_aperform_pushes_jobs_a_worker_runs(
    registry: Registry, settings: Settings, start_worker: StartWorker
) -> None:
    ran: list[tuple[str, list[Any]]] = []

    @asynctask.job(registry=registry)
    def add(a: int, b: int) -> None:
        ran.append((asynctask.current_job().jid, [a, b]))

    async def push(client: AsyncClient) -> tuple[str, list[str], str]:
        one = await add.set(client=client).aperform_async(1, 2)
        many = await add.set(client=client).aperform_bulk([[n, n] for n in range(5)])
        later = await add.set(client=client).aperform_in(3600, 9, 9)
        return one, many, later

    one, many, later = run(push, settings, registry)
    assert Queue("default", settings=settings).size == 6
    [scheduled] = list(ScheduledSet(settings=settings))
    assert scheduled.jid == later and scheduled.args == [9, 9]
    assert 3590 < scheduled.score - time.time() <= 3600
    start_worker()
    wait_until(lambda: len(ran) == 6)
    assert sorted(ran) == sorted([(one, [1, 2]), *((jid, [n, n]) for n, jid in enumerate(many))])


def test_a_thousand_coroutines_pushing_at_once_each_push_once(
    registry: Registry, settings: Settings, note: JobDefinition[Any]
) -> None:
    async def push(client: AsyncClient) -> list[str]:
        return list(await asyncio.gather(*(note.set(client=client).aperform_async(n) for n in range(1000))))

    jids = run(push, settings, registry)
    assert len(set(jids)) == 1000
    queued = {record.jid: record.args for record in Queue("default", settings=settings)}
    assert queued == {jid: [n] for n, jid in enumerate(jids)}


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_coroutines_pushing_side_by_side_share_transactions(
    registry: Registry, settings: Settings, note: JobDefinition[Any]
) -> None:
    commits: list[int] = []

    async def push(client: AsyncClient) -> list[str]:
        engine: AsyncEngine = client.pusher.engine  # type: ignore[attr-defined]
        event.listen(engine.sync_engine, "commit", lambda connection: commits.append(1))
        return list(await asyncio.gather(*(note.set(client=client).aperform_async(n) for n in range(500))))

    jids = run(push, settings, registry)
    assert {record.jid for record in Queue("default", settings=settings)} == set(jids)
    # One transaction each would be 500.
    assert 0 < len(commits) <= 500 // 5


@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_push_committed_with_others_fails_alone(
    registry: Registry, settings: Settings, note: JobDefinition[Any]
) -> None:
    """Plain pushes made side by side share a transaction: a row the database refuses fails
    only the push it belongs to."""

    def misplace(job: dict[str, Any], queue: str, call_next: Callable[[], Any]) -> Any:
        if job["args"] == [3]:
            # A middleware's queue is not checked again: wider than the column, it is refused.
            job["queue"] = "q" * 300
        return call_next()

    async def push(client: AsyncClient) -> list[Any]:
        pushes = [note.set(client=client).aperform_async(n) for n in range(6)]
        return list(await asyncio.gather(*pushes, return_exceptions=True))

    outcomes = run(push, settings, registry, middleware=Chain([misplace]))
    assert isinstance(outcomes[3], DataError)
    pushed = [jid for n, jid in enumerate(outcomes) if n != 3]
    assert sorted(r.jid for r in Queue("default", settings=settings)) == sorted(pushed)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_thousand_coroutines_pushing_set_off_no_full_collection(
    registry: Registry, settings: Settings, note: JobDefinition[Any]
) -> None:
    """The coroutines of the trips under way make their next pushes together: trips too full
    would set off a young collection each, keep every push under way for the oldest generation,
    and soon a full collection, which walks every object of the process (SQLAlchemy's too)."""

    collected: list[int] = []

    def note_collection(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collected.append(info["generation"])

    async def push(client: AsyncClient) -> None:
        pushing = note.set(client=client)
        await pushing.aperform_async(-1)

        async def twenty(n: int) -> None:
            for _ in range(20):
                await pushing.aperform_async(n)

        gc.collect()
        gc.callbacks.append(note_collection)
        try:
            await asyncio.gather(*(twenty(n) for n in range(1000)))
        finally:
            gc.callbacks.remove(note_collection)

    run(push, settings, registry)
    assert Queue("default", settings=settings).size == 20_001
    assert collected.count(2) == 0, f"collections by generation: {Counter(collected)}"


def test_a_tracked_job_and_a_unique_one_go_through_the_async_client(
    registry: Registry, settings: Settings, engine: Engine, start_worker: StartWorker
) -> None:
    @asynctask.job(registry=registry, track=True)
    def tracked(n: int) -> None: ...

    @asynctask.job(registry=registry, unique_for=60)
    def once(n: int) -> None: ...

    async def push(client: AsyncClient) -> tuple[str, str, str]:
        jid = await tracked.set(client=client).aperform_async(1)
        first = await once.set(client=client).aperform_async(7)
        second = await once.set(client=client).aperform_async(7)
        return jid, first, second

    jid, first, second = run(push, settings, registry, middleware=Chain([TrackingClientMiddleware()]))
    assert second == first
    assert Queue("default", settings=settings).size == 2

    def status() -> str | None:
        with engine.connect() as connection:
            return connection.execute(select(Event.status).where(Event.job_id == jid)).scalar_one_or_none()

    # Recorded with the push: an enqueue, then the worker's run.
    assert settings.uses_redis or status() == "enqueue"
    start_worker(server_middleware=Chain([TrackingServerMiddleware()]), flusher="thread")
    wait_until(lambda: status() == "finish", 10)


def test_a_client_of_the_other_kind_is_refused(
    registry: Registry, settings: Settings, note: JobDefinition[Any]
) -> None:
    client = Client(settings, registry=registry, middleware=Chain())
    with pytest.raises(TypeError, match="aperform_\\* needs an AsyncClient"):
        asyncio.run(note.set(client=client).aperform_async(1))

    async def refused(async_client: AsyncClient) -> None:
        with pytest.raises(TypeError, match="perform_\\* needs a Client"):
            note.set(client=async_client).perform_async(1)

    run(refused, settings, registry)
    client.close()


def test_a_payload_over_the_limit_is_refused_before_anything_is_pushed(
    registry: Registry, settings: Settings
) -> None:
    @asynctask.job(registry=registry)
    def note(text: str) -> None: ...

    async def push(client: AsyncClient) -> None:
        with pytest.raises(ValueError, match="limit"):
            await note.set(client=client).aperform_bulk([["x"], ["y" * (settings.max_payload_bytes + 1)]])

    run(push, settings, registry)
    assert Queue("default", settings=settings).size == 0


@pytest.mark.parametrize("backend", ["redis"])
def test_a_redis_broker_named_by_its_broker_url_takes_async_pushes(
    registry: Registry, settings: Settings, note: JobDefinition[Any]
) -> None:
    named = Settings(**{**settings.__dict__, "redis_url": "", "broker_url": settings.redis_url})

    async def push(client: AsyncClient) -> str:
        return await note.set(client=client).aperform_async(1)

    jid = run(push, named, registry)
    assert [r.jid for r in Queue("default", settings=settings)] == [jid]


@pytest.mark.parametrize("backend", ["redis"])
def test_a_push_sent_with_others_fails_alone(
    registry: Registry, settings: Settings, note: JobDefinition[Any]
) -> None:
    """Plain pushes made side by side share a round trip: each still gets its own outcome."""

    blocker = redis.Redis.from_url(settings.redis_url)
    blocker.set(f"{settings.namespace}:queue:broken", "not a list")

    async def push(client: AsyncClient) -> list[Any]:
        pushes = [
            note.set(client=client, queue="broken" if n == 3 else "default").aperform_async(n)
            for n in range(6)
        ]
        return list(await asyncio.gather(*pushes, return_exceptions=True))

    outcomes = run(push, settings, registry)
    assert isinstance(outcomes[3], redis.ResponseError) and "WRONGTYPE" in str(outcomes[3])
    pushed = [jid for n, jid in enumerate(outcomes) if n != 3]
    assert sorted(r.jid for r in Queue("default", settings=settings)) == sorted(pushed)
    blocker.close()


@pytest.mark.parametrize("backend", ["redis"])
def test_a_push_after_the_server_closed_an_idle_connection_is_sent_once(
    registry: Registry, settings: Settings, note: JobDefinition[Any]
) -> None:
    admin = redis.Redis.from_url(settings.redis_url)
    name = f"asynctask:{socket.gethostname()}:{os.getpid()}"

    async def push(client: AsyncClient) -> list[str]:
        first = await note.set(client=client).aperform_async(1)
        for entry in admin.client_list():
            if entry["name"] == name:
                admin.client_kill_filter(_id=entry["id"])
        await asyncio.sleep(0.05)
        return [first, await note.set(client=client).aperform_async(2)]

    jids = run(push, settings, registry)
    assert sorted(r.jid for r in Queue("default", settings=settings)) == sorted(jids)
    admin.close()


@pytest.fixture
def note(registry: Registry) -> JobDefinition[Any]:
    @asynctask.job(registry=registry)
    def note(n: int) -> None: ...

    return note


@pytest.fixture
def closed(monkeypatch: pytest.MonkeyPatch) -> list[AsyncClient]:
    """The async clients closed during the test, in order."""
    seen: list[AsyncClient] = []
    close = AsyncClient.aclose

    async def aclose(self: AsyncClient) -> None:
        seen.append(self)
        await close(self)

    monkeypatch.setattr(AsyncClient, "aclose", aclose)
    return seen


def test_the_default_client_of_a_loop_closes_its_connections_when_the_loop_ends(
    registry: Registry, settings: Settings, monkeypatch: pytest.MonkeyPatch, closed: list[AsyncClient]
) -> None:
    configured = Client(settings, registry=registry)
    monkeypatch.setattr(client_module, "_default", configured)

    @asynctask.job(registry=registry)
    def note(n: int) -> None:
        pass

    async def push() -> tuple[AsyncClient, weakref.ref[asyncio.AbstractEventLoop]]:
        # No client named, none closed: the loop's default one is the user's to forget.
        await note.aperform_async(1)
        return default_async_client(), weakref.ref(asyncio.get_running_loop())

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        used, loop = asyncio.run(push())
        gc.collect()
    configured.close()
    assert closed == [used]
    # Neither the loop nor its client outlives it.
    assert loop() is None
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []
    assert Queue("default", settings=settings).size == 1


def test_an_async_job_s_pushes_leave_no_connection_open_once_its_worker_stopped(
    registry: Registry,
    settings: Settings,
    start_worker: StartWorker,
    client: Client,
    monkeypatch: pytest.MonkeyPatch,
    closed: list[AsyncClient],
) -> None:
    # As a worker process's jobs push to the broker of its environment.
    monkeypatch.setattr(client_module, "_default", client)
    used: list[AsyncClient] = []

    @asynctask.job(registry=registry, queue="later")
    def note(n: int) -> None:
        pass

    @asynctask.job(registry=registry)
    async def fan_out(n: int) -> None:
        await note.aperform_async(n)
        used.append(default_async_client())

    fan_out.perform_async(1)
    worker = start_worker()
    wait_until(lambda: used, 20)
    assert closed == []
    worker.stop()
    wait_until(lambda: worker._stopped.is_set(), 30)
    assert closed == used
    assert Queue("later", settings=settings).size == 1
