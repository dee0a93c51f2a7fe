"""Failures of AsyncTask jobs, as Ruby's ``Sidekiq::RetrySet`` and ``Sidekiq::DeadSet`` read them."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
import redis

from tests.conftest import wait_until
from tests.interop.conftest import PythonJob, RunRuby, Services

pytestmark = pytest.mark.interop

MESSAGE = "boom ✓ é 日本"
#: Ruby-style backtrace line written by asynctask: ``path:line:in `function'``.
FRAME = re.compile(r"^(?P<file>.+):(?P<line>\d+):in `(?P<function>[^']+)'$")


def only_entry(listing: dict[str, Any]) -> dict[str, Any]:
    assert listing["size"] == 1, listing
    entries: list[dict[str, Any]] = listing["entries"]
    return entries[0]


def assert_failure_fields(entry: dict[str, Any], *, klass: str, jid: str, error_class: str) -> None:
    assert entry["klass"] == entry["display_class"] == klass
    assert entry["jid"] == jid
    assert entry["args"] == [MESSAGE]
    assert entry["queue"] == "default"
    assert entry["error_message"] == MESSAGE
    assert entry["error_class"] == error_class
    assert isinstance(entry["failed_at"], float)
    assert entry["created_at"] <= entry["enqueued_at"] <= time.time()
    assert entry["created_at"] <= entry["failed_at"] <= time.time()


def test_failed_job_is_in_ruby_retry_set(
    ruby: RunRuby, services: Services, python_job: PythonJob, db: redis.Redis
) -> None:
    services.python_worker()
    before = time.time()
    jid = python_job("InteropFailer").perform_async(MESSAGE)
    wait_until(lambda: db.zcard("retry") == 1, timeout=15)

    entry = only_entry(ruby("sorted_set.rb", "retry"))
    assert_failure_fields(entry, klass="InteropFailer", jid=jid, error_class="interop_jobs.InteropError")
    assert entry["retry_count"] == 0
    assert entry["retried_at"] is None
    assert before <= entry["failed_at"]
    # Due after Sidekiq's first backoff: 0**4 + 15 s, plus 0-9 s of jitter.
    assert entry["failed_at"] + 15 - 0.5 <= entry["at"] <= entry["failed_at"] + 15 + 9 + 0.5
    assert entry["score"] == entry["at"]
    assert entry["item"]["retry"] is True and entry["item"]["backtrace"] is True
    # Sidekiq::SortedEntry#error_backtrace inflates it: innermost frame first, as Ruby's backtraces.
    backtrace = entry["error_backtrace"]
    assert isinstance(backtrace, list) and len(backtrace) >= 2
    frames = [FRAME.match(line) for line in backtrace]
    assert all(frames), backtrace
    assert frames[0] is not None and frames[0]["function"] == "_explode"
    assert frames[0]["file"].endswith("interop_jobs.py")
    assert frames[1] is not None and frames[1]["function"] == "fail"
    assert db.zcard("dead") == 0


def test_retry_zero_goes_straight_to_ruby_dead_set(
    ruby: RunRuby, services: Services, python_job: PythonJob, db: redis.Redis
) -> None:
    services.python_worker()
    jid = python_job("InteropNoRetry").perform_async(MESSAGE)
    wait_until(lambda: db.zcard("dead") == 1, timeout=15)

    entry = only_entry(ruby("sorted_set.rb", "dead"))
    assert_failure_fields(entry, klass="InteropNoRetry", jid=jid, error_class="interop_jobs.InteropError")
    assert entry["item"]["retry"] == 0
    assert entry["retry_count"] == 0
    assert entry["retried_at"] is None
    assert entry["error_backtrace"] is None, "no backtrace option, no error_backtrace"
    assert entry["failed_at"] <= entry["at"] <= time.time()
    assert ruby("sorted_set.rb", "retry")["size"] == 0


def test_exhausted_retries_go_to_ruby_dead_set(
    ruby: RunRuby, services: Services, python_job: PythonJob, db: redis.Redis
) -> None:
    """retry: 1 -> first failure in RetrySet; Ruby's "Add to queue" reruns it; it dies."""
    services.python_worker()
    jid = python_job("InteropFailer", retry=1).perform_async(MESSAGE)
    wait_until(lambda: db.zcard("retry") == 1, timeout=15)

    first = only_entry(ruby("sorted_set.rb", "retry", "add_to_queue"))
    assert first["retry_count"] == 0 and first["item"]["retry"] == 1
    wait_until(lambda: db.zcard("dead") == 1, timeout=15)

    entry = only_entry(ruby("sorted_set.rb", "dead"))
    assert_failure_fields(entry, klass="InteropFailer", jid=jid, error_class="interop_jobs.InteropError")
    assert entry["retry_count"] == 1
    assert entry["failed_at"] == first["failed_at"], "failed_at is the first failure's"
    assert isinstance(entry["retried_at"], float) and entry["retried_at"] > entry["failed_at"]
    assert entry["created_at"] == first["created_at"]
    assert entry["enqueued_at"] > first["enqueued_at"], "re-enqueued by Ruby's add_to_queue"
    assert entry["error_backtrace"] and "_explode" in entry["error_backtrace"][0]
    assert ruby("sorted_set.rb", "retry")["size"] == 0
