"""Strings no store can hold, from job code and from callers, on every broker and tracking database.

Job code that logs, fails or raises with U+0000, lone surrogates, megabyte texts or mixed
scripts gets its words recorded, escaped and cut, while another tenant's ordinary task goes on
to its exact counts; callers handing such strings in as data are refused before anything is
written; and what the database still refuses is set aside, counted, and the rest applied.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
from sqlalchemy import Engine, func, select

import asynctask
from asynctask import InvalidString, JobFailed, QueueSpec, Registry, Settings, Tracking, current_job
from asynctask.api import Queue
from asynctask.brokers.sql.transactions import Store
from asynctask.job import JobDefinition
from asynctask.keys import Keys
from asynctask.middleware import Chain, TrackingClientMiddleware, TrackingServerMiddleware
from asynctask.storable import DEFAULT_TEXT_LIMIT
from asynctask.tracking import setaside
from asynctask.tracking.isolate import BatchRefused
from asynctask.tracking.models import Event, EventMessage, SetAside
from asynctask.worker import Worker
from tests.brokers.conftest import MakeClient
from tests.brokers.test_hostile import Hostile, RawStore, failing, job
from tests.conftest import all_pages, wait_until
from tests.tracking_fixtures import tracked_rows, wait_for_task

#: What the poison jobs say, as job code may by accident (a binary field, a quoted bad input).
POISON = {
    "nul": "row 7: \x00 in the name",
    "surrogate": "decoded \ud800 half a pair",
    "big": "body: " + "x" * 1_000_000,
    "mixed": "日本語 Ελληνικά עברית 🙂",
}
ESCAPED = {"nul": "row 7: \\u0000 in the name", "surrogate": "decoded \\ud800 half a pair"}
ORDINARY_JOBS = 1000
MARKER = "... (truncated, "


@pytest.fixture(params=["redis", "redis+postgresql", "sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    """The broker suite's backends, and Redis with its tracking in PostgreSQL."""
    return str(request.param)


class Jobs:
    def __init__(self, registry: Registry) -> None:
        self.ends: list[float] = []
        lock = threading.Lock()

        @asynctask.job(registry=registry, queue="mixed", retry=1)
        def poison(chunk: list[dict[str, str]]) -> None:
            do, what = chunk[0]["do"], chunk[0]["what"]
            text = POISON[what]
            if do == "log":
                current_job().log(text)
                current_job().progress(1, 2)
            elif do == "fail":
                raise JobFailed(text)
            else:
                raise RuntimeError(text)

        @poison.retry_in
        def _soon(count: int, exc: BaseException, job: dict[str, Any]) -> float:
            return 0.01

        @asynctask.job(registry=registry, queue="mixed")
        def ordinary(chunk: list[int]) -> None:
            current_job().log(f"row {chunk[0]} imported")
            with lock:
                self.ends.append(time.time())

        self.poison: JobDefinition[Any] = poison
        self.ordinary: JobDefinition[Any] = ordinary


@pytest.fixture
def jobs(registry: Registry) -> Jobs:
    return Jobs(registry)


def poison_items() -> list[dict[str, str]]:
    return [{"do": do, "what": what} for do in ("log", "fail", "error") for what in POISON]


def start_tracked(start_worker: Callable[..., Worker]) -> Worker:
    return start_worker(
        server_middleware=Chain([TrackingServerMiddleware()]), flusher="thread", queues=(QueueSpec("mixed"),)
    )


@pytest.mark.slow
def test_poison_strings_are_recorded_escaped_while_another_tenants_task_runs_to_exact_counts(
    tracking: Tracking,
    jobs: Jobs,
    engine: Engine,
    start_worker: Callable[..., Worker],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    poisoned = tracking.create_task(jobs.poison, poison_items() * 3, tenant="careless")
    ordinary = tracking.create_task(jobs.ordinary, range(ORDINARY_JOBS), tenant="careful")
    start_tracked(start_worker)

    def finished() -> float | None:
        view = tracking.get_task(ordinary.id)
        return time.time() if view.status == "finished" else None

    seen = wait_until(finished, 120, interval=0.05)
    assert len(jobs.ends) == ORDINARY_JOBS
    assert seen - max(jobs.ends) <= 2.0
    view = tracking.get_task(ordinary.id)
    assert {k: v for k, v in view.counts.items() if v} == {"finish": ORDINARY_JOBS}

    done = wait_for_task(tracking, poisoned.id, timeout=60)
    assert {k: v for k, v in done.counts.items() if v} == {"finish": 12, "failed": 12, "error": 12}
    # Pages small enough that each text is read whole (a page of 100 reads 10 KB of each).
    events: list[Any] = all_pages(lambda after: tracking.list_events(poisoned.id, after=after, limit=10))
    by_what: dict[tuple[str, str], list[Any]] = {}
    for event in events:
        item = event.params[0][0]
        by_what.setdefault((item["do"], item["what"]), []).append(event)
    for what, shown in ESCAPED.items():
        for event in by_what[("fail", what)]:
            assert event.status == "failed" and event.error == shown
        for event in by_what[("error", what)]:
            assert event.status == "error" and event.error == f"RuntimeError: {shown}"
            assert event.attempt == 2
        for event in by_what[("log", what)]:
            assert shown in [m.text for m in event.messages]
    for event in by_what[("fail", "mixed")]:
        assert event.error == POISON["mixed"]
    for event in by_what[("fail", "big")] + by_what[("error", "big")]:
        assert event.error is not None and MARKER in event.error
        assert len(event.error.encode()) <= DEFAULT_TEXT_LIMIT + 40
    for event in by_what[("log", "big")]:
        (logged,) = [m.text for m in event.messages if m.text.startswith("body: ")]
        assert logged.endswith(f"{MARKER}{len(POISON['big'])} bytes)")
        assert event.progress_done == 1
    with engine.connect() as connection:
        longest = connection.execute(select(func.max(func.length(EventMessage.text)))).scalar_one()
        assert longest <= DEFAULT_TEXT_LIMIT + 40
        assert connection.execute(select(func.count()).select_from(SetAside)).scalar_one() == 0
    troubles = [
        r.getMessage() for r in caplog.records if "died" in r.getMessage() or "failed:" in r.getMessage()
    ]
    assert troubles == []


@pytest.mark.parametrize(
    ("value", "where"),
    [
        ({"name": "a\x00b"}, r"items\[3\]\['name'\] holds a NUL"),
        ("x\ud800", r"items\[3\] holds a lone surrogate"),
    ],
)
def test_create_task_refuses_unstorable_items_and_writes_nothing(
    tracking: Tracking, jobs: Jobs, engine: Engine, settings: Settings, value: Any, where: str
) -> None:
    # The bad item is past the first batch: what was staged before it must go too.
    items = [*({"do": "log", "what": "mixed"} for _ in range(3)), value]
    with pytest.raises(InvalidString, match=where) as refused:
        tracking.create_task(jobs.poison, items)
    assert (refused.value.field, refused.value.item) == ("items", 3)
    with pytest.raises(InvalidString, match=r"meta\['note'\] holds a NUL"):
        tracking.create_task(jobs.ordinary, [1], meta={"note": "\x00"})
    assert tracked_rows(engine) == (0, 0)
    assert Queue("mixed", settings=settings).size == 0


def test_perform_async_of_a_tracked_job_refuses_unstorable_args_and_pushes_nothing(
    make_client: MakeClient, registry: Registry, engine: Engine, settings: Settings
) -> None:
    @asynctask.job(registry=registry, track=True, queue="mixed")
    def sync(account: dict[str, str]) -> None: ...

    client = make_client(middleware=Chain([TrackingClientMiddleware()]))
    for bad, named in (("\x00", "NUL"), ("\udbff", "lone surrogate")):
        with pytest.raises(InvalidString, match=rf"args\[0\]\['id'\] holds a {named}"):
            sync.set(client=client).perform_async({"id": bad})
    assert Queue("mixed", settings=settings).size == 0
    with engine.connect() as connection:
        assert connection.execute(select(func.count()).select_from(Event)).scalar_one() == 0


def test_a_transition_the_database_refuses_is_set_aside_and_the_rest_applied(
    tracking: Tracking, jobs: Jobs, engine: Engine, settings: Settings, start_worker: Callable[..., Worker]
) -> None:
    """An entry no check foresaw (a progress count past every column's range, written by some
    other writer) reaches the database: it is set aside with its bytes, the batch it came in is
    applied without it, and the writer goes on."""
    # On a queue no worker takes: no run of theirs changes these events while the entry waits (a
    # start applied in the same batch would replace the progress before it reached SQL).
    task = tracking.create_task(jobs.ordinary, range(3), queue="untaken")
    events = tracking.list_events(task.id).items
    jids = [e.job_id for e in events]
    refused = json.dumps([jids[0], "progress", time.time(), None, 2**70, None])
    fine = [json.dumps([jid, "log", time.time(), "checked by hand"]) for jid in jids]
    if settings.uses_redis:
        conn = redis.Redis.from_url(settings.redis_url)
        conn.xadd(
            Keys(settings.namespace).tracking_stream,
            {"s": 1, "d": f"[{','.join([*fine[:1], refused, *fine[1:]])}]"},
        )
        conn.close()
        start_tracked(start_worker)
    else:
        store = Store(engine)
        with pytest.raises(BatchRefused):
            with store.write() as tx:
                store.record(tx.connection, [*fine[:1], refused, *fine[1:]])
        # The writer tries again, as after any database error: this time the refused one goes aside.
        with store.write() as tx:
            store.record(tx.connection, [*fine[:1], refused, *fine[1:]])

    def set_aside() -> list[Any]:
        with engine.connect() as connection:
            return setaside.latest(connection, 10)

    (row,) = wait_until(set_aside, 20)
    assert row.job_id == jids[0] and "progress" in row.data and str(2**70) in row.data
    wait_until(
        lambda: all(
            "checked by hand" in [m.text for m in e.messages] for e in tracking.list_events(task.id).items
        ),
        20,
    )
    with engine.connect() as connection:
        assert setaside.count(connection) == 1


#: Payloads another client pushed (bypassing this client's checks), tracked, with strings no
#: store holds: (payload, the status its event ends in, the params its event shows).
FOREIGN = [
    (failing(80, '["\\u0000 in a field"]', track="true"), "error", ["\\u0000 in a field"]),
    (failing(81, '[{"k\\ud800": "\\udfff"}]', track="true"), "error", [{"k\\ud800": "\\udfff"}]),
    (
        failing(82, f'["{"y" * 100_000}"]', track="true"),
        "error",
        [f"{'y' * DEFAULT_TEXT_LIMIT}{MARKER}100000 bytes)"],
    ),
    # Buried unrun: its event says why, naming the class escaped (no params: it never started).
    (job(83, class_='"No\\u0000Such"', args='["\\ud800"]', track="true"), "error", None),
]


def test_tracked_payloads_of_another_client_with_unstorable_strings_are_tracked_escaped(
    settings: Settings, engine: Engine, registry: Registry, start_worker: Callable[..., Worker]
) -> None:
    @asynctask.job(registry=registry)
    def fails(*args: Any) -> None:
        raise RuntimeError("boom")

    store = RawStore(settings)
    try:
        for raw, _, _ in FOREIGN:
            store.add(Hostile("foreign", raw, ""), "queued")
    finally:
        store.close()
    worker = start_worker(server_middleware=Chain([TrackingServerMiddleware()]), flusher="thread")
    threads = {p.thread for p in worker.manager._processors}
    jids = [f"{n:024x}" for n in (80, 81, 82, 83)]

    def events() -> dict[str, Any] | None:
        with engine.connect() as connection:
            rows = {r.job_id: r for r in connection.execute(select(Event).where(Event.job_id.in_(jids)))}
        return rows if len(rows) == len(jids) and all(r.status != "working" for r in rows.values()) else None

    found = wait_until(events, 20)
    for jid, (_, status, params) in zip(jids, FOREIGN, strict=True):
        assert (found[jid].status, found[jid].params) == (status, params)
    assert "No\\x00Such" in found[jids[3]].error
    assert all(thread.is_alive() for thread in threads)
    assert {p.thread for p in worker.manager._processors} == threads


def test_any_job_with_a_lone_surrogate_is_refused_and_a_nul_passes_when_untracked(
    make_client: MakeClient, registry: Registry, settings: Settings
) -> None:
    """No UTF-8 encodes a lone surrogate, so no broker takes it; U+0000 is written as a JSON
    escape, which every broker stores, and only tracking (SQL text) refuses it."""

    @asynctask.job(registry=registry, queue="mixed")
    def untracked(value: Any) -> None: ...

    client = make_client()
    with pytest.raises(InvalidString, match=r"args\[0\]\['note'\] holds a lone surrogate"):
        untracked.set(client=client).perform_async({"note": "\ud800"})
    with pytest.raises(InvalidString, match=r"job\['tags'\]\[0\] holds a lone surrogate"):
        untracked.set(client=client, tags=["\udfff"]).perform_async(1)
    with pytest.raises(InvalidString):
        untracked.set(client=client).perform_bulk([[1], ["\udc80"]])
    assert Queue("mixed", settings=settings).size == 0
    untracked.set(client=client).perform_async("a\x00b")
    assert Queue("mixed", settings=settings).size == 1
