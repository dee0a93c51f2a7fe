"""What a process loads: a client or a Redis worker that does not track never imports the
tracking database's code (SQLAlchemy) or the item schema validator, which would more than double
its memory; the names that need them still work, imported on first use."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import redis
from sqlalchemy.exc import SQLAlchemyError

import asynctask
from asynctask.brokers.redis import RedisBroker
from asynctask.brokers.sql import SqlBroker
from asynctask.keys import Keys
from asynctask.tasks import service
from tests.conftest import REDIS_URL

ROOT = Path(__file__).resolve().parent.parent

#: Modules a Redis client or worker that does not track has no use for.
UNUSED = ("sqlalchemy", "jsonschema_rs")

PERFORM_ASYNC = f"""
import sys

import asynctask

@asynctask.job
def greet(name: str) -> None: ...

greet.perform_async("world")
print(",".join(m for m in {UNUSED!r} if m in sys.modules))
"""

WORKER = f"""
import sys
import threading

import asynctask
from asynctask.worker import Worker

ran = threading.Event()

@asynctask.job
def greet(name: str) -> None:
    ran.set()

worker = Worker()
thread = threading.Thread(target=worker.run, kwargs={{"install_signal_handlers": False}})
thread.start()
greet.perform_async("world")
assert ran.wait(10), "the job did not run"
worker.stop()
thread.join(30)
print(",".join(m for m in {UNUSED!r} if m in sys.modules))
"""


def run_python(code: str, namespace: str, **settings: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASYNCTASK_")}
    env |= {
        "ASYNCTASK_REDIS_URL": REDIS_URL,
        "ASYNCTASK_NAMESPACE": namespace,
        "ASYNCTASK_TRACKING": "0",
        **settings,
    }
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_perform_async_without_tracking_loads_no_sql_nor_schema_code(
    namespace: str, conn: redis.Redis
) -> None:
    assert run_python(PERFORM_ASYNC, namespace) == ""
    assert conn.llen(Keys(namespace).queue("default")) == 1


def test_a_redis_worker_without_tracking_loads_no_sql_nor_schema_code(namespace: str) -> None:
    assert run_python(WORKER, namespace) == ""


def test_a_tracking_redis_worker_leaves_sql_to_its_flusher_process(namespace: str, tmp_path: Path) -> None:
    """Tracking on (the default) with the default child flusher: the worker process itself
    runs untracked jobs without SQLAlchemy; the flusher child is the one that writes SQL."""
    tracking = {"ASYNCTASK_TRACKING": "1", "ASYNCTASK_DATABASE_URL": f"sqlite:///{tmp_path / 't.db'}"}
    assert run_python(WORKER, namespace, **tracking) == ""


def test_the_names_that_need_sql_are_loaded_on_first_use() -> None:
    for name in asynctask.__all__:
        assert getattr(asynctask, name) is not None
    assert asynctask.Tracking is service.Tracking
    assert asynctask.create_task is service.create_task
    assert "list_tasks" in dir(asynctask)
    assert redis.RedisError in RedisBroker.errors and OSError in RedisBroker.errors
    assert SQLAlchemyError in SqlBroker.errors and OSError in SqlBroker.errors
