"""Client and server middleware on every backend: modify, drop, wrap, skip; a broken one loses nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import asynctask
from asynctask import Client, Registry, Settings
from asynctask.api import ProcessSet, Queue, RetrySet
from asynctask.middleware import Chain
from asynctask.worker import Worker
from tests.brokers.conftest import JobKind, MakeClient
from tests.conftest import wait_until

StartWorker = Callable[..., Worker]


def test_client_middleware_modifies_and_drops_pushes_and_wraps_the_pollers_pushes(
    registry: Registry, settings: Settings, make_client: MakeClient, start_worker: StartWorker
) -> None:
    seen: list[tuple[int, Any, Any]] = []

    @asynctask.job(registry=registry)
    def work(n: int) -> None:
        job = asynctask.current_job().job
        seen.append((n, job.get("stamp"), job.get("polled")))

    def stamp(job: dict[str, Any], queue: str, call_next: Callable[[], Any]) -> Any:
        job["stamp"] = f"{queue}-{job['args'][0]}"
        return call_next()

    def drop_odd(job: dict[str, Any], queue: str, call_next: Callable[[], Any]) -> Any:
        return None if job["args"][0] % 2 else call_next()

    def polled(job: dict[str, Any], queue: str, call_next: Callable[[], Any]) -> Any:
        job["polled"] = True
        return call_next()

    client = make_client(middleware=Chain([stamp, drop_odd]))
    jids = work.set(client=client).perform_bulk([[0], [1], [2], [3]])
    assert len(jids) == 2
    assert work.set(client=client).perform_async(5) == ""  # dropped: no jid
    work.set(client=client).perform_in(0.3, 4)
    assert Queue("default", settings=settings).size == 2
    # The worker's client chain runs when its poller enqueues a scheduled job.
    start_worker(client_middleware=Chain([polled]))
    wait_until(lambda: len(seen) == 3)
    assert sorted(seen) == [(0, "default-0", None), (2, "default-2", None), (4, "default-4", True)]


def test_server_middleware_wraps_sees_errors_and_can_skip(
    registry: Registry, client: Client, settings: Settings, start_worker: StartWorker, job_kind: JobKind
) -> None:
    events: list[str] = []

    @asynctask.job(registry=registry)
    @job_kind
    def work(n: int) -> None:
        events.append(f"job {n}")
        if n == 2:
            raise ValueError("two")

    def around(definition: Any, job: dict[str, Any], queue: str, call_next: Callable[[], Any]) -> None:
        n = job["args"][0]
        if n == 3:
            events.append("skip 3")
            return
        events.append(f"before {n} {definition.name} {queue}")
        try:
            call_next()
        except ValueError as exc:
            events.append(f"saw {exc}")
            raise
        events.append(f"after {n}")

    work.set(client=client).perform_bulk([[1], [2], [3]])
    start_worker(concurrency=1, async_concurrency=1, server_middleware=Chain([around]))
    wait_until(lambda: len(events) == 7)
    assert events == [
        "before 1 work default", "job 1", "after 1",
        "before 2 work default", "job 2", "saw two",
        "skip 3",
    ]  # fmt: skip
    [entry] = wait_until(lambda: list(RetrySet(settings=settings)))
    assert entry.args == [2]


def test_a_middleware_that_raises_sends_the_job_to_retry(
    registry: Registry, client: Client, settings: Settings, start_worker: StartWorker, job_kind: JobKind
) -> None:
    ran: list[str] = []

    @asynctask.job(registry=registry)
    @job_kind
    def fine() -> None:
        ran.append("fine")

    def broken(definition: Any, job: dict[str, Any], queue: str, call_next: Callable[[], Any]) -> None:
        raise ConnectionError("tracking database is down")

    jid = fine.set(client=client).perform_async()
    worker = start_worker(server_middleware=Chain([broken]))
    retries = RetrySet(settings=settings)
    [entry] = wait_until(lambda: list(retries))
    assert (entry.jid, entry.error_class) == (jid, "ConnectionError")
    assert entry.error_message == "tracking database is down"
    assert ran == []
    worker.stop()
    processes = ProcessSet(settings=settings)
    wait_until(lambda: processes.size == 0)
    # Not lost: retried now, it runs in a worker without the broken middleware.
    assert entry.retry() is True
    start_worker()
    wait_until(lambda: ran == ["fine"])
