"""Hostile payloads written straight into a queue, the schedule or the retry set, on every
backend: each ends in the dead set with a clear error and what was pushed kept, no thread
dies, nothing stays claimed, and the worker goes on running jobs."""

from __future__ import annotations

import base64
import json
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import Engine, text

import asynctask
from asynctask import Client, Registry, Settings
from asynctask.api import DeadSet, RetrySet
from asynctask.db.engine import create_database_engine
from asynctask.keys import Keys
from asynctask.worker import Worker
from asynctask.worker.manager import Manager
from asynctask.worker.poller import Poller
from tests.conftest import wait_until

StartWorker = Callable[..., Worker]

#: The worker's max_payload_bytes here: small, so that payloads near it are quick to push.
LIMIT = 64 * 1024
#: Fields a burial adds to a job (the rest must be the job as pushed).
ERROR_FIELDS = {"error_message", "error_class", "failed_at", "retried_at", "retry_count", "error_backtrace"}
#: A field the poller rewrites when it moves a due job to its queue.
REWRITTEN = {"enqueued_at"}


@dataclass(frozen=True)
class Hostile:
    name: str
    raw: bytes
    #: A fragment of the dead entry's error_message.
    error: str
    #: "bytes": the dead entry keeps the payload byte for byte; "job": the payload is a valid
    #: job, buried as itself (found by its jid) with the error fields added.
    kept_as: str = "bytes"
    #: In the schedule and retry sets the poller moves it (a valid job) and the processor
    #: judges it, as it would in a queue; None: left out of that test.
    due_kept_as: str | None = "same"
    #: SQLite: stored as a BLOB rather than as (invalid) text.
    blob: bool = False

    @property
    def jid(self) -> str:
        return str(json.loads(self.raw)["jid"])

    @property
    def postgres_can_store(self) -> bool:
        try:
            self.raw.decode()
        except UnicodeDecodeError:
            return False
        return b"\x00" not in self.raw


def job(n: int, **fields: str | None) -> bytes:
    """A job's JSON with each field given as raw JSON text (None leaves it out), so that any
    value can be spelled as a hostile client would."""
    base: dict[str, str | None] = {
        "retry": "true",
        "queue": '"default"',
        "class": '"takes_two"',
        "args": "[1,2]",
        "jid": f'"{n:024x}"',
        "created_at": "1700000000.5",
        "enqueued_at": "1700000000.5",
    }
    base.update({key.rstrip("_"): value for key, value in fields.items()})
    return ("{" + ",".join(f'"{k}":{v}' for k, v in base.items() if v is not None) + "}").encode()


def failing(n: int, args: str, **fields: str | None) -> bytes:
    """A job that runs, raises, and (retry 0) dies at once."""
    return job(n, class_='"fails"', args=args, retry="0", **fields)


NOT_JSON = "not valid JSON"
NOT_UTF8 = "not UTF-8 text"
TOO_DEEP = "nested deeper than 100 levels"
#: Python's words for a float JSON cannot hold (1e999 reads as infinity).
NO_FLOAT = "Out of range float values are not JSON compliant"

HOSTILE = [
    # Not JSON, or not a JSON object.
    Hostile("truncated JSON", job(1)[:-9], NOT_JSON),
    Hostile("empty", b"", NOT_JSON),
    Hostile("whitespace only", b" \n\t ", NOT_JSON),
    Hostile("a JSON array", b"[1,2,3]", "a JSON array, not an object"),
    Hostile("a JSON string", b'"takes_two"', "a JSON string, not an object"),
    Hostile("a JSON number", b"42", "a JSON number, not an object"),
    Hostile("JSON null", b"null", "a JSON null, not an object"),
    Hostile("trailing garbage", job(8) + b" x", NOT_JSON),
    Hostile("two objects", job(9) + job(9), NOT_JSON),
    Hostile("single quotes", b"{'class': 'takes_two', 'args': [1, 2]}", NOT_JSON),
    Hostile("invalid UTF-8", job(11, args='["XFF"]').replace(b"XFF", b"\xff"), NOT_UTF8),
    Hostile("binary garbage", b"\x00\x9f\x92\x96\xfe\xff\x80\x01" * 16, NOT_UTF8, blob=True),
    Hostile("UTF-16", job(13).decode().encode("utf-16"), NOT_UTF8),
    Hostile("UTF-8 byte order mark", b"\xef\xbb\xbf" + job(14), "byte order mark"),
    Hostile("raw NUL in a string", job(15, class_='"takes\x00two"'), NOT_JSON),
    Hostile(
        "UTF-8-encoded surrogate", job(16, args='["XD800",1]').replace(b"XD800", b"\xed\xa0\x80"), NOT_UTF8
    ),
    Hostile("nested 101 levels", job(17, args="[" * 100 + "]" * 100), TOO_DEEP),
    Hostile("objects nested 101 levels", job(18, args="[" + '{"a":' * 99 + "1" + "}" * 99 + "]"), TOO_DEEP),
    Hostile("nested 1,000 levels", job(19, args="[" * 1000 + "]" * 1000), TOO_DEEP),
    Hostile("nested 30,000 levels", job(20, args="[" * 30_000 + "]" * 30_000), TOO_DEEP),
    Hostile("NaN", job(21, args="[NaN,1]"), "NaN"),
    Hostile("Infinity", job(22, args="[Infinity,1]"), "Infinity"),
    Hostile("-Infinity", job(23, args="[-Infinity,1]"), "-Infinity"),
    Hostile("a 5,000-digit int", job(24, args="[1" + "0" * 5000 + ",1]"), NOT_JSON),
    Hostile(
        "over the size limit", job(25, args=f'["{"x" * LIMIT}",1]'), "max_payload_bytes", due_kept_as=None
    ),
    # JSON objects that are not jobs: what the runtime reads must have the right type.
    Hostile("no class", job(30, class_=None), "'class'"),
    Hostile("class not a string", job(31, class_="42"), "'class'"),
    Hostile("class empty", job(32, class_='""'), "'class'"),
    Hostile("args an object", job(33, args='{"a":1}'), "'args' must be a list, got a JSON object"),
    Hostile("no args", job(34, args=None), "'args' must be a list"),
    Hostile("no jid", job(35, jid=None), "'jid'"),
    Hostile("jid a number", job(36, jid="123"), "'jid'"),
    Hostile("jid with a NUL", job(37, jid='"\\u0000abc"'), "'jid'"),
    Hostile("queue not a string", job(38, queue='["default"]'), "'queue'"),
    Hostile("queue too long", job(39, queue='"' + "q" * 300 + '"'), "'queue'"),
    Hostile("retry a string", job(40, retry='"abc"'), "'retry'"),
    Hostile("retry negative", job(41, retry="-1"), "'retry'"),
    Hostile("retry a float", job(42, retry="1.5"), "'retry'"),
    Hostile("retry_count below -1", job(43, retry_count="-5"), "'retry_count'"),
    Hostile("retry_count a string", job(44, retry_count='"2"'), "'retry_count'"),
    Hostile("retry_count a boolean", job(45, retry_count="true"), "'retry_count'"),
    Hostile("at a string", job(46, at='"tomorrow"'), "'at'"),
    Hostile("enqueued_at a string", job(47, enqueued_at='"2024-01-01"'), "'enqueued_at'"),
    Hostile("created_at an object", job(48, created_at="{}"), "'created_at'"),
    Hostile("retry_queue a number", job(49, retry_queue="5"), "'retry_queue'"),
    Hostile("duplicate keys, the last invalid", job(50)[:-1] + b',"retry":"abc"}', "'retry'"),
    # Valid jobs that cannot run, or fail, carrying values that are hard to write back.
    Hostile("unknown class", job(60, class_='"NoSuchJob"'), "is not registered", "job"),
    Hostile("a module path as class", job(61, class_='"tests.jobs.evil_marker"'), "is not registered", "job"),
    Hostile("wrong arg count", job(62, args="[1]"), "cannot take 1 argument", "job"),
    Hostile(
        "lone surrogate, unknown class",
        job(63, class_='"NoSuchJob"', args='["\\ud800"]'),
        "is not registered",
        "job",
    ),
    Hostile("lone surrogate, failing job", failing(64, '["\\udfff x"]'), "boom", "job"),
    Hostile("1e999, failing job", failing(65, "[1e999]"), NO_FLOAT, due_kept_as="bytes"),
    Hostile("1e999, unknown class", job(66, class_='"NoSuchJob"', args="[-1e999]"), NO_FLOAT),
    Hostile("-0, failing job", failing(67, "[-0,-0.0]"), "boom", "job"),
    Hostile("nested 100 levels, failing job", failing(68, "[" * 99 + "1e20" + "]" * 99), "boom", "job"),
    Hostile(
        "string near the size limit, failing job",
        failing(69, f'["{"é" * (LIMIT // 2 - 200)}"]'),
        "boom",
        "job",
    ),
    Hostile(
        "duplicate keys, the last valid",
        job(70)[:-1] + b',"class":"NoSuchJob"}',
        "'NoSuchJob' is not registered",
        "job",
    ),
    Hostile("a backtrace option that is not a number", failing(71, "[]", backtrace='"yes"'), "boom", "job"),
]


class RawStore:
    """The backend's storage, written and read without AsyncTask's code."""

    def __init__(self, settings: Settings) -> None:
        self.redis: redis.Redis | None = None
        self.engine: Engine | None = None
        if settings.uses_redis:
            self.redis = redis.Redis.from_url(settings.redis_url)
            self.keys = Keys(settings.namespace)
        else:
            self.engine = create_database_engine(settings.broker_url)
        self.postgres = self.engine is not None and self.engine.dialect.name == "postgresql"

    def close(self) -> None:
        if self.redis is not None:
            self.redis.close()
        if self.engine is not None:
            self.engine.dispose()

    def can_store(self, case: Hostile) -> bool:
        return case.postgres_can_store or not self.postgres

    def add(self, case: Hostile, state: str, at: float = 0.0) -> None:
        """Add ``case`` to the default queue ("queued") or to the "schedule" / "retry" set."""
        if self.redis is not None:
            if state == "queued":
                self.redis.sadd(self.keys.queues, "default")
                self.redis.lpush(self.keys.queue("default"), case.raw)
            else:
                self.redis.zadd(self.keys.retry if state == "retry" else self.keys.schedule, {case.raw: at})
            return
        assert self.engine is not None
        value: str | bytes = case.raw
        spelled = ":payload"
        try:
            value = case.raw.decode()
        except UnicodeDecodeError:
            # SQLite keeps what it is given: a BLOB, or bytes cast to TEXT that are not UTF-8.
            spelled = ":payload" if case.blob else "CAST(:payload AS TEXT)"
        with self.engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO asynctask_job (jid, queue, state, priority, run_at, payload, attempts) "
                    f"VALUES (:jid, 'default', :state, 0, :at, {spelled}, 0)"
                ),
                {
                    "jid": case.name[:64],
                    "state": "scheduled" if state == "schedule" else state,
                    "at": at,
                    "payload": value,
                },
            )

    def dead(self) -> list[dict[str, Any]]:
        """The dead set's entries, decoded by the json module."""
        if self.redis is not None:
            return [json.loads(raw) for raw in self.redis.zrange(self.keys.dead, 0, -1)]
        assert self.engine is not None
        with self.engine.connect() as connection:
            rows = connection.execute(text("SELECT payload FROM asynctask_job WHERE state = 'dead'"))
            return [json.loads(payload) for (payload,) in rows]

    def claimed(self) -> int:
        """Jobs claimed and not released: in-flight list entries, or locked rows."""
        if self.redis is not None:
            return sum(int(self.redis.llen(key)) for key in self.redis.hkeys(self.keys.inflight_registry))
        return self._rows("locked_by IS NOT NULL")

    def waiting(self) -> int:
        """Jobs still in the queue or the schedule and retry sets."""
        if self.redis is not None:
            keys = self.keys
            return int(
                self.redis.llen(keys.queue("default"))
                + self.redis.zcard(keys.schedule)
                + self.redis.zcard(keys.retry)
            )
        return self._rows("state <> 'dead'")

    def _rows(self, where: str) -> int:
        assert self.engine is not None
        with self.engine.connect() as connection:
            return int(
                connection.execute(text(f"SELECT count(*) FROM asynctask_job WHERE {where}")).scalar_one()
            )


@pytest.fixture
def store(settings: Settings) -> Iterator[RawStore]:
    raw = RawStore(settings)
    yield raw
    raw.close()


@dataclass
class Casualties:
    """Processor threads that died, and poller passes that failed."""

    threads: list[BaseException]
    polls: list[BaseException]


@pytest.fixture
def casualties(monkeypatch: pytest.MonkeyPatch) -> Casualties:
    seen = Casualties([], [])
    died = Manager.processor_died
    enqueue = Poller.enqueue

    def processor_died(manager: Manager, processor: Any, exc: BaseException) -> None:
        seen.threads.append(exc)
        died(manager, processor, exc)

    def poll(poller: Poller) -> int:
        try:
            return enqueue(poller)
        except Exception as exc:
            seen.polls.append(exc)
            raise

    monkeypatch.setattr(Manager, "processor_died", processor_died)
    monkeypatch.setattr(Poller, "enqueue", poll)
    return seen


@pytest.fixture
def jobs(registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The jobs the hostile payloads name; returns the list of normal runs."""
    monkeypatch.setenv("ASYNCTASK_EVIL_MARKER", str(tmp_path / "imported"))
    ran: list[Any] = []

    @asynctask.job(registry=registry)
    def takes_two(a: int, b: int) -> None:
        ran.append(a + b)

    @asynctask.job(registry=registry)
    def fails(*args: Any) -> None:
        raise RuntimeError("boom")

    return ran


def original(entry: dict[str, Any]) -> bytes:
    """The bytes a dead entry of an unusable payload keeps."""
    if "payload_base64" in entry:
        return base64.b64decode(entry["payload_base64"])
    return str(entry["args"][0]).encode()


def check_buried(cases: list[Hostile], dead: list[dict[str, Any]], kept_as: Callable[[Hostile], str]) -> None:
    """Each case has its dead entry, with its error, keeping what was pushed."""
    assert len(dead) == len(cases)
    by_bytes = {original(e): e for e in dead if e["class"] == "AsyncTask::UnparseableJob"}
    by_jid = {e["jid"]: e for e in dead if e["class"] != "AsyncTask::UnparseableJob"}
    for case in cases:
        if kept_as(case) == "bytes":
            entry = by_bytes.get(case.raw)
            assert entry is not None, f"{case.name}: no dead entry keeps its bytes"
            assert entry["error_class"] and entry["failed_at"], case.name
        else:
            entry = by_jid.get(case.jid)
            assert entry is not None, f"{case.name}: no dead entry for its jid"
            pushed = json.loads(case.raw)
            assert {k: v for k, v in entry.items() if k not in ERROR_FIELDS | REWRITTEN} == {
                k: v for k, v in pushed.items() if k not in ERROR_FIELDS | REWRITTEN
            }, case.name
        assert case.error in entry["error_message"], (case.name, entry["error_message"])


def check_alive(
    worker: Worker, threads: set[Any], casualties: Casualties, client: Client, ran: list[Any]
) -> None:
    assert casualties.threads == [] and casualties.polls == []
    manager = worker.manager
    assert {p.thread for p in manager._processors} == threads
    assert all(thread.is_alive() for thread in threads) and len(threads) == manager.settings.concurrency
    client.push({"class": "takes_two", "args": [20, 22]})
    wait_until(lambda: 42 in ran)


def test_hostile_payloads_in_a_queue_are_buried_and_the_worker_lives_on(
    client: Client,
    store: RawStore,
    jobs: list[Any],
    casualties: Casualties,
    start_worker: StartWorker,
    tmp_path: Path,
) -> None:
    cases = [case for case in HOSTILE if store.can_store(case)]
    for case in cases:
        store.add(case, "queued")
    store.add(Hostile("fine", job(99, args="[1,2]"), ""), "queued")
    worker = start_worker(max_payload_bytes=LIMIT)
    threads = {p.thread for p in worker.manager._processors}
    wait_until(lambda: jobs == [3] and len(store.dead()) >= len(cases), timeout=20)
    check_buried(cases, store.dead(), lambda case: case.kept_as)
    wait_until(lambda: store.claimed() == 0 and store.waiting() == 0)
    check_alive(worker, threads, casualties, client, jobs)
    assert not (tmp_path / "imported").exists() and "tests.jobs.evil_marker" not in sys.modules


def test_hostile_payloads_in_the_schedule_and_retry_sets_are_buried(
    client: Client,
    store: RawStore,
    jobs: list[Any],
    casualties: Casualties,
    start_worker: StartWorker,
) -> None:
    cases = [case for case in HOSTILE if store.can_store(case) and case.due_kept_as is not None]
    for index, case in enumerate(cases):
        store.add(case, "schedule" if index % 2 else "retry", at=1.0)
    store.add(Hostile("fine", job(99, args="[1,2]"), ""), "schedule", at=1.0)
    worker = start_worker(max_payload_bytes=LIMIT)
    threads = {p.thread for p in worker.manager._processors}
    wait_until(lambda: jobs == [3] and len(store.dead()) >= len(cases), timeout=20)

    def kept_as(case: Hostile) -> str:
        return case.kept_as if case.due_kept_as == "same" else str(case.due_kept_as)

    check_buried(cases, store.dead(), kept_as)
    wait_until(lambda: store.claimed() == 0 and store.waiting() == 0)
    check_alive(worker, threads, casualties, client, jobs)


def test_retry_count_cannot_buy_more_runs_than_retry_allows(
    registry: Registry,
    settings: Settings,
    store: RawStore,
    casualties: Casualties,
    start_worker: StartWorker,
) -> None:
    runs: list[str] = []

    @asynctask.job(registry=registry)
    def counted(tag: str) -> None:
        runs.append(tag)
        raise RuntimeError(tag)

    # retry 2: three runs at most. -1 is a count Sidekiq's "Retry now" leaves after a first
    # failure; what is not an integer of -1 or more is refused before running.
    counts = {"fresh": None, "minus one": "-1", "last allowed": "1", "huge": str(10**30)}
    counts |= {"negative": "-5", "string": '"0"', "text": '"abc"', "float": "0.5", "boolean": "true"}
    jids = {}
    for n, (tag, count) in enumerate(counts.items()):
        case = Hostile(tag, job(n, class_='"counted"', args=f'["{tag}"]', retry="2", retry_count=count), "")
        jids[tag] = case.jid
        store.add(case, "queued")
    start_worker()
    dead = DeadSet(settings=settings)
    retries = RetrySet(settings=settings)

    def all_dead() -> bool:
        # Retries are due in 15 s or more: move them to the queue now, as the poller would then.
        for entry in retries:
            entry.add_to_queue()
        return dead.size == len(counts)

    wait_until(all_dead, timeout=30)
    assert Counter(runs) == {"fresh": 3, "minus one": 3, "last allowed": 1, "huge": 1}
    assert retries.size == 0
    by_jid = {entry.jid: entry for entry in dead}
    for tag in counts:
        entry = by_jid[jids[tag]]
        if tag in runs:
            assert entry.error_message == tag
        else:
            assert "'retry_count' must be an integer of -1 or more" in (entry.error_message or ""), tag
    assert by_jid[jids["fresh"]].retry_count == by_jid[jids["minus one"]].retry_count == 2
    assert by_jid[jids["last allowed"]].retry_count == 2
    assert by_jid[jids["huge"]].retry_count == 10**30 + 1
    assert casualties.threads == []
