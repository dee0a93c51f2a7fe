"""Jobs pushed by Ruby's ``Sidekiq::Client`` are performed by a real ``asynctask worker``."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import redis

from tests.conftest import wait_until
from tests.interop.conftest import RunRuby, Services
from tests.interop.interop_jobs import PERFORMED_KEY

pytestmark = pytest.mark.interop

#: Everything JSON can carry, written by Ruby's JSON.generate: raw UTF-8 (accents, CJK, emoji,
#: U+2028), escapes, a NUL, nil, booleans, a bignum, floats Ruby prints with an exponent
#: (1.0e+20, 1.0e-05), and nested hashes and arrays.
RICH_ARGS: list[Any] = [
    1,
    -7,
    2**64 + 1,
    3.25,
    0.1,
    1e20,
    1e-05,
    -0.5,
    "ünïcödé ✓ 日本語 😀",
    'quote " backslash \\ slash / tab \t newline \n nul \u0000 ls \u2028',
    "",
    None,
    True,
    False,
    [],
    {},
    [1, [2, [3, None]]],
    {"outer": {"inner": [1.5, {"deep": None, "ß": "é"}], "list": ["a", {}]}, "n": None, "f": 2.0},
]


def performed(db: redis.Redis) -> list[Any]:
    return [json.loads(raw) for raw in db.lrange(PERFORMED_KEY, 0, -1)]


@pytest.mark.parametrize("name", ["InteropRecorder", "InteropAsyncRecorder"])
def test_ruby_client_push_is_performed_by_asynctask_worker(
    name: str, ruby: RunRuby, services: Services, db: redis.Redis
) -> None:
    """By a plain job, and by an async one (awaited on the worker's event loop)."""
    services.python_worker()
    jids = ruby(
        "push.rb",
        stdin=[
            {"class": name, "args": RICH_ARGS},
            {"class": name, "args": ["second", {"k": [None]}], "queue": "default", "retry": 3},
        ],
    )
    assert len(jids) == 2 and all(isinstance(jid, str) and len(jid) == 24 for jid in jids)

    wait_until(lambda: db.llen(PERFORMED_KEY) >= 2, timeout=15)
    got = performed(db)
    assert sorted(got, key=len, reverse=True) == [RICH_ARGS, ["second", {"k": [None]}]]
    # Floats keep their type and exact value (JSON does not turn 2.0 into 2 or 1e20 into an int).
    rich = max(got, key=len)
    assert [type(v) for v in rich] == [type(v) for v in RICH_ARGS]
    assert rich[5] == 1e20 and isinstance(rich[5], float) and rich[17]["f"] == 2.0
    assert isinstance(rich[17]["f"], float)
    # Done: nothing left in the queue, the retry set or the dead set.
    wait_until(lambda: db.llen("queue:default") == 0, timeout=5)
    assert db.zcard("retry") == 0 and db.zcard("dead") == 0


def test_ruby_scheduled_push_is_performed_by_asynctask_worker(
    ruby: RunRuby, services: Services, db: redis.Redis
) -> None:
    services.python_worker(ASYNCTASK_SCHEDULED_POLL_INTERVAL="0.3")
    at = time.time() + 1.0
    [jid] = ruby("push.rb", stdin=[{"class": "InteropRecorder", "args": ["later", 2.5], "at": at}])
    assert db.zcard("schedule") == 1, "Sidekiq::Client.push with 'at' writes to the schedule set"

    wait_until(lambda: db.llen(PERFORMED_KEY) >= 1, timeout=15)
    assert time.time() >= at
    assert performed(db) == [["later", 2.5]]
    assert db.zcard("schedule") == 0
    assert len(jid) == 24
