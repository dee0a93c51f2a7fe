"""Byte compatibility: AsyncTask writes the same JSON as Ruby's Sidekiq 6.4 for the same push.

Each case pushes one job the Ruby way (ruby/wire_push.rb, which returns the exact bytes Sidekiq
stored) and the equivalent AsyncTask way; the stored bytes must be identical once the values
that differ by nature (jid, created_at, enqueued_at) are replaced. Key order, separators,
escaping and number formatting are all compared.
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import redis

import asynctask
from asynctask import Client, JobDefinition, Registry, Settings
from tests.interop.conftest import RunRuby

pytestmark = pytest.mark.interop

ARGS: list[Any] = [
    1,
    -2.5,
    "ünï ✓ 日本 😀 \u2028",
    'q " b \\ / \t \n \u0000 \u001f',
    None,
    True,
    {"nested": {"list": [1, None, {}], "ß": []}, "f": 0.1},
    [],
    12345678901234567890,
]

# A stored job with its per-push values replaced by placeholders; each replacement is counted.
_VARYING = {
    "jid": re.compile(r'"jid":"[0-9a-f]{24}"'),
    "created_at": re.compile(r'"created_at":\d{10}\.\d+(?=[,}])'),
    "enqueued_at": re.compile(r'"enqueued_at":\d{10}\.\d+(?=[,}])'),
}


@dataclass(frozen=True)
class Stored:
    key: str
    raw: bytes
    score: float | None

    def normalized(self) -> tuple[str, str, dict[str, int]]:
        text = self.raw.decode("utf-8")
        counts: dict[str, int] = {}
        for name, pattern in _VARYING.items():
            text, counts[name] = pattern.subn(f'"{name}":"<{name}>"', text)
        return self.key, text, counts


def drain(db: redis.Redis) -> list[Stored]:
    """What a push left in Redis (the schedule, then every queue oldest first); then remove it."""
    stored = [Stored("schedule", raw, score) for raw, score in db.zrange("schedule", 0, -1, withscores=True)]
    for queue in sorted(name.decode() for name in db.smembers("queues")):
        stored += [
            Stored(f"queue:{queue}", raw, None) for raw in reversed(db.lrange(f"queue:{queue}", 0, -1))
        ]
        db.delete(f"queue:{queue}")
    db.delete("schedule", "queues")
    return stored


def from_ruby(entries: list[dict[str, Any]]) -> list[Stored]:
    return [Stored(e["key"], base64.b64decode(e["raw"]), e["score"]) for e in entries]


@dataclass
class Python:
    """The Python twins of ruby/wire_push.rb's worker classes, pushing to the test's database."""

    client: Client
    wire: JobDefinition[Any]
    options: JobDefinition[Any]


@pytest.fixture
def python(redis_url: str, db: redis.Redis) -> Python:
    registry = Registry()

    @asynctask.job(name="WireWorker", registry=registry)
    def wire(*args: Any) -> None: ...

    # Ruby: sidekiq_options queue: "critical", retry: 3, backtrace: 5, tags: ["a", "b"]
    @asynctask.job(
        name="OptionsWorker", queue="critical", retry=3, backtrace=5, tags=["a", "b"], registry=registry
    )
    def options(*args: Any) -> None: ...

    return Python(Client(Settings(redis_url=redis_url), connection=db, registry=registry), wire, options)


Case = tuple[dict[str, Any], Callable[[Python], object]]


def compare(ruby: RunRuby, db: redis.Redis, python: Python, cases: list[Case]) -> list[tuple[Stored, Stored]]:
    """Run every case both ways; assert the normalized bytes match; return the (ruby, python) pairs."""
    assert db.dbsize() == 0
    ruby_results = ruby("wire_push.rb", stdin=[spec for spec, _ in cases])
    pairs = []
    for (spec, push), ruby_entries in zip(cases, ruby_results, strict=True):
        [ruby_stored] = from_ruby(ruby_entries)
        push(python)
        [python_stored] = drain(db)
        ruby_key, ruby_text, ruby_counts = ruby_stored.normalized()
        python_key, python_text, python_counts = python_stored.normalized()
        assert python_key == ruby_key, spec
        assert python_text == ruby_text, f"{spec}\nruby:   {ruby_stored.raw!r}\npython: {python_stored.raw!r}"
        assert python_counts == ruby_counts, spec
        assert ruby_counts["jid"] == ruby_counts["created_at"] == 1, ruby_stored.raw
        pairs.append((ruby_stored, python_stored))
    return pairs


def test_immediate_pushes_store_the_same_bytes_as_ruby(
    ruby: RunRuby, db: redis.Redis, python: Python
) -> None:
    extra = {"queue": "critical", "retry": 5, "tags": ["x"], "custom": {"k": "v"}, "backtrace": True}
    cases: list[Case] = [
        (
            {"kind": "client_push", "item": {"class": "SomeName", "args": ARGS}},
            lambda py: py.client.push({"class": "SomeName", "args": ARGS}),
        ),
        (
            {"kind": "client_push", "item": {"class": "SomeName", "args": ARGS[:2], **extra}},
            lambda py: py.client.push({"class": "SomeName", "args": ARGS[:2], **extra}),
        ),
        (
            {"kind": "perform_async", "worker": "WireWorker", "args": ARGS},
            lambda py: py.wire.set(client=py.client).perform_async(*ARGS),
        ),
        (
            {"kind": "perform_async", "worker": "OptionsWorker", "args": ARGS[:3]},
            lambda py: py.options.set(client=py.client).perform_async(*ARGS[:3]),
        ),
        (
            {"kind": "perform_async", "worker": "OptionsWorker", "args": [], "set": {"retry": False}},
            lambda py: py.options.set(client=py.client, retry=False).perform_async(),
        ),
        (
            {"kind": "perform_async", "worker": "WireWorker", "args": [1], "set": {"queue": "low"}},
            lambda py: py.wire.set(client=py.client, queue="low").perform_async(1),
        ),
    ]
    for ruby_stored, _ in compare(ruby, db, python, cases):
        assert ruby_stored.key.startswith("queue:")
        assert ruby_stored.normalized()[2]["enqueued_at"] == 1


def test_scheduled_pushes_store_the_same_bytes_as_ruby(
    ruby: RunRuby, db: redis.Redis, python: Python
) -> None:
    at = round(time.time() + 3600, 3)
    cases: list[Case] = [
        (
            {"kind": "client_push", "item": {"class": "SomeName", "args": ARGS, "at": at}},
            lambda py: py.client.push({"class": "SomeName", "args": ARGS, "at": at}),
        ),
        (
            {"kind": "client_push", "item": {"class": "SomeName", "args": [1], "queue": "low", "at": at}},
            lambda py: py.client.push({"class": "SomeName", "args": [1], "queue": "low", "at": at}),
        ),
        (
            {"kind": "perform_in", "worker": "WireWorker", "interval": 60, "args": ARGS},
            lambda py: py.wire.set(client=py.client).perform_in(60, *ARGS),
        ),
        (
            {"kind": "perform_in", "worker": "OptionsWorker", "interval": at, "args": ["x"]},
            lambda py: py.options.set(client=py.client).perform_at(at, "x"),
        ),
    ]
    pushed = time.time()
    pairs = compare(ruby, db, python, cases)
    for ruby_stored, python_stored in pairs:
        assert ruby_stored.key == python_stored.key == "schedule"
        # Sidekiq 6.4 stores scheduled jobs without enqueued_at; the run-at time is the score.
        assert ruby_stored.normalized()[2]["enqueued_at"] == 0
        assert ruby_stored.score is not None and python_stored.score is not None
    # Same 'at' given: the same score. perform_in(60): both about a minute from now.
    for index in (0, 1, 3):
        assert pairs[index][0].score == pairs[index][1].score == at
    for stored in pairs[2]:
        assert stored.score is not None and pushed + 59 <= stored.score <= time.time() + 61


def test_set_then_perform_in_stores_the_same_bytes_as_ruby(
    ruby: RunRuby, db: redis.Redis, python: Python
) -> None:
    cases: list[Case] = [
        (
            {
                "kind": "perform_in",
                "worker": "WireWorker",
                "interval": 60,
                "args": [1],
                "set": {"queue": "low"},
            },
            lambda py: py.wire.set(client=py.client, queue="low").perform_in(60, 1),
        ),
    ]
    compare(ruby, db, python, cases)


def test_exponent_floats_store_the_same_bytes_as_ruby(ruby: RunRuby, db: redis.Redis, python: Python) -> None:
    args = [1e20, 1e-05]
    cases: list[Case] = [
        (
            {"kind": "client_push", "item": {"class": "SomeName", "args": args}},
            lambda py: py.client.push({"class": "SomeName", "args": args}),
        ),
    ]
    compare(ruby, db, python, cases)
