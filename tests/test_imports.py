"""What a process loads: a client or a Redis worker never imports the tracking database's code
(SQLAlchemy) or the item schema validator, which would more than double its memory; a tracking
worker leaves SQL to its flusher child, and the names that need SQL are imported on first use."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import redis
from sqlalchemy import select

from asynctask.db.engine import create_database_engine
from asynctask.db.migrate import upgrade
from asynctask.keys import Keys
from asynctask.tracking.models import Event
from asynctask.worker import watchdog_process
from tests.conftest import REDIS_URL, wait_until

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

#: Runs one job (tracked or not, by the first argument), stops the worker, then prints the
#: job's jid and the unused modules it loaded.
WORKER = f"""
import sys
import threading

import asynctask
from asynctask.worker import Worker

ran = threading.Event()

@asynctask.job(track=sys.argv[1] == "tracked")
def greet(name: str) -> None:
    ran.set()

worker = Worker()
thread = threading.Thread(target=worker.run, kwargs={{"install_signal_handlers": False}})
thread.start()
jid = greet.perform_async("world")
assert ran.wait(10), "the job did not run"
worker.stop()
thread.join(30)
print(jid, ",".join(m for m in {UNUSED!r} if m in sys.modules))
"""

#: Prints the unused modules loaded so far.
LOADED = f"print(','.join(m for m in {UNUSED!r} if m in sys.modules))"

#: Every name imported on first use: none is loaded with the package, each is the service's.
LAZY_NAMES = """
import sys

import asynctask

lazy = ("Tracking", "cancel_task", "create_task", "default_tracking", "get_task", "list_events",
        "list_tasks", "retry_task")
assert set(lazy) <= set(dir(asynctask)) and set(lazy) <= set(asynctask.__all__)
assert "sqlalchemy" not in sys.modules, "importing asynctask loaded SQLAlchemy"
assert "asynctask.tasks.service" not in sys.modules
found = {name: getattr(asynctask, name) for name in lazy}
from asynctask.tasks import service
assert all(value is getattr(service, name) for name, value in found.items())
assert "sqlalchemy" in sys.modules
print("ok")
"""


#: What the worker's watchdog process loads: its program alone, run as a file the way the worker
#: runs it (``-I -S``), with none of the package's modules; it lives as long as the worker.
WATCHDOG = """
import runpy, sys

runpy.run_path(sys.argv[1], run_name="watchdog")
print(",".join(sorted(m for m in sys.modules if m.split(".")[0] in ("asynctask", "redis"))))
"""

#: Every name of the package imported on first use is its module's own.
EVERY_LAZY_NAME = """
import importlib

import asynctask

for name, module in asynctask._LAZY.items():
    assert name in asynctask.__all__, name
    assert getattr(asynctask, name) is getattr(importlib.import_module(module), name), name
print("ok")
"""


#: The decorators named like submodules stay the decorators, loaded first or after those modules.
DECORATORS = """
import asynctask
import asynctask.job
import asynctask.periodic.schedule
from asynctask.job import JobDefinition

assert "asynctask.job" in __import__("sys").modules
assert asynctask.job is asynctask.job.__globals__["job"], asynctask.job
assert asynctask.periodic is asynctask.periodic.__globals__["periodic"], asynctask.periodic

@asynctask.job
def greet(name: str) -> None: ...

print(type(greet).__name__, "greet" in asynctask.default_registry)
"""


def run_python(code: str, namespace: str, *argv: str, **settings: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASYNCTASK_")}
    env |= {
        "ASYNCTASK_REDIS_URL": REDIS_URL,
        "ASYNCTASK_NAMESPACE": namespace,
        "ASYNCTASK_TRACKING": "0",
        **settings,
    }
    done = subprocess.run(
        [sys.executable, "-c", code, *argv], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_perform_async_without_tracking_loads_no_sql_nor_schema_code(
    namespace: str, conn: redis.Redis
) -> None:
    assert run_python(PERFORM_ASYNC, namespace) == ""
    assert conn.llen(Keys(namespace).queue("default")) == 1


def test_a_redis_worker_without_tracking_loads_no_sql_nor_schema_code(namespace: str) -> None:
    _, _, loaded = run_python(WORKER, namespace, "untracked").partition(" ")
    assert loaded == ""


def test_a_tracking_redis_worker_leaves_sql_to_its_flusher_process(namespace: str, tmp_path: Path) -> None:
    """Tracking on (the default) with the default child flusher: the worker process runs a
    tracked job without loading SQLAlchemy, and its job's event reaches SQL, so the flusher
    child wrote it; stopping the worker right after the job still applies its last transitions."""
    url = f"sqlite:///{tmp_path / 't.db'}"
    upgrade(url)
    tracking = {"ASYNCTASK_TRACKING": "1", "ASYNCTASK_DATABASE_URL": url}
    jid, _, loaded = run_python(WORKER, namespace, "tracked", **tracking).partition(" ")
    assert loaded == ""
    engine = create_database_engine(url)
    try:
        with engine.connect() as connection:
            row = connection.execute(select(Event.status, Event.attempt).where(Event.job_id == jid)).one()
    finally:
        engine.dispose()
    assert tuple(row) == ("finish", 1)


def test_the_names_that_need_sql_are_loaded_on_first_use(namespace: str) -> None:
    assert run_python(LAZY_NAMES, namespace) == "ok"


def test_importing_an_integration_loads_no_sql_code(namespace: str) -> None:
    """Importing an integration (what a Celery, RQ or Dramatiq worker process does) leaves SQL
    to the flusher and to create_task: every process such a worker forks copies what it loaded."""
    for runtime in ("celery", "rq", "dramatiq"):
        code = f"import sys, asynctask.integrations.{runtime}\n" + LOADED
        assert run_python(code, namespace) == "", runtime


def test_the_worker_s_watchdog_process_loads_no_module_of_the_package() -> None:
    program = str(Path(watchdog_process.__file__))
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", WATCHDOG, program], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


def test_every_name_imported_on_first_use_is_its_module_s(namespace: str) -> None:
    assert run_python(EVERY_LAZY_NAME, namespace) == "ok"


def test_job_and_periodic_stay_the_decorators_when_their_modules_load(namespace: str) -> None:
    assert run_python(DECORATORS, namespace) == "JobDefinition True"


#: A job that writes which of the modules a SQL worker has no use for its process has loaded.
SQL_WORKER_JOBS = """
import sys

import asynctask

@asynctask.job
def report(path: str) -> None:
    unused = ("redis", "asynctask.brokers.redis")
    with open(path, "w") as out:
        out.write(",".join(m for m in unused if m in sys.modules))
"""


def test_a_sql_worker_never_loads_redis(tmp_path: Path) -> None:
    """redis-py takes a tenth of a second to load: a SQL worker, from its command line to its
    first job, has no use for it."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    upgrade(url)
    (tmp_path / "sql_worker_jobs.py").write_text(SQL_WORKER_JOBS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASYNCTASK_") and k != "REDIS_URL"}
    env |= {"ASYNCTASK_BROKER_URL": url, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    report = tmp_path / "loaded.txt"
    submit = (
        "import sql_worker_jobs\nfrom asynctask import Client\n"
        f"sql_worker_jobs.report.set(client=Client()).perform_async({str(report)!r})"
    )
    subprocess.run([sys.executable, "-c", submit], env=env, cwd=tmp_path, check=True, timeout=60)
    worker = subprocess.Popen(
        [sys.executable, "-m", "asynctask", "worker", "-r", "sql_worker_jobs"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(report.exists, 30)
    finally:
        worker.terminate()
        worker.wait(60)
    assert report.read_text() == ""
