"""Real Celery workers for the tests: a broker (Redis database or RabbitMQ queue of the test's
own), AsyncTask tracking (Redis stream, or the SQL writer), the HTTP API over it, and
``celery worker`` subprocesses of tests/integrations/celery_jobs.py."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from celery import Celery
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import Engine

from asynctask import Client, Registry, Settings, Tracking
from asynctask.api.reader import close_shared
from asynctask.db.engine import create_database_engine
from asynctask.db.migrate import upgrade
from asynctask.integrations.celery import submittable
from asynctask.tokens import create_token
from tests.conftest import db_url, fresh_postgres_schema, wait_until
from tests.integrations.celery_jobs import make_app
from tests.processes import stop_groups
from tests.records import written_lines
from webapi import create_app
from webapi.resources import EXTENSION

ROOT = Path(__file__).resolve().parents[2]
RABBITMQ_URL = os.environ.get("ASYNCTASK_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
#: Broker and tracking write path of each setup.
SETUPS = ("redis", "rabbitmq", "rabbitmq-sql")
SETTLED = ("finished", "finished_with_errors", "cancelled")
TENANT = "acme"


@dataclass
class CeleryRig:
    broker: str
    queue: str
    settings: Settings
    engine: Engine
    client: Client
    registry: Registry
    app: Celery
    api: Flask
    http: FlaskClient
    token: str
    runs: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def tracking(self) -> Tracking:
        return Tracking(self.client, self.engine)

    def create(self, job: object, items: Any, **options: Any) -> Any:
        """``create_task`` as the API's tenant, so that the API shows the task."""
        return self.tracking.create_task(job, items, tenant=TENANT, **options)

    def submittable(self, name: str) -> Any:
        return submittable(self.app.tasks[name], registry=self.registry)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def get(self, url: str) -> Any:
        response = self.http.get(url, headers=self.headers())
        assert response.status_code == 200, response.get_data(as_text=True)
        return response.get_json()

    def post(self, url: str, body: Any) -> Any:
        return self.http.post(url, json=body, headers=self.headers())

    def wait_settled(self, task_id: str, timeout: float = 45.0) -> dict[str, Any]:
        last: list[dict[str, Any]] = []

        def settled() -> dict[str, Any] | None:
            body: dict[str, Any] = self.get(f"/api/tasks/{task_id}?errors=100")
            last[:] = [body]
            return body if body["status"] in SETTLED else None

        try:
            result: dict[str, Any] = wait_until(settled, timeout, interval=0.1)
        except AssertionError:
            raise AssertionError(
                f"task {task_id} not settled: {last[0]['status']} {last[0]['counts']}"
            ) from None
        return result

    def events(self, task_id: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.get(f"/api/tasks/{task_id}/events?limit=500")["items"]
        return items

    def worker_env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ASYNCTASK_", "CELERY_"))}
        env |= {
            "PYTHONPATH": str(ROOT),
            "CELERY_TEST_BROKER": self.broker,
            "CELERY_TEST_QUEUE": self.queue,
            "CELERY_TEST_RUNS": str(self.runs),
            "ASYNCTASK_DATABASE_URL": self.settings.database_url,
        }
        if self.settings.uses_redis:
            env |= {
                "ASYNCTASK_REDIS_URL": self.settings.redis_url,
                "ASYNCTASK_NAMESPACE": self.settings.namespace,
            }
        return env | extra

    def start_worker(self, concurrency: int = 4, **extra: str) -> subprocess.Popen[bytes]:
        """A ``celery worker`` of the test's queue, in a session of its own (its pool
        processes die with it when the test kills the group); ``extra`` environment."""
        command = [sys.executable, "-m", "celery", "-A", "tests.integrations.celery_jobs", "worker"]
        command += ["-Q", self.queue, "-c", str(concurrency), "-P", "prefork", "-l", "WARNING"]
        command += ["-n", f"{self.queue}-{len(self.procs)}@%h", "--without-gossip", "--without-mingle"]
        proc = subprocess.Popen(command, env=self.worker_env(**extra), cwd=ROOT, start_new_session=True)
        self.procs.append(proc)
        return proc

    def start_flusher(self) -> subprocess.Popen[bytes]:
        """``asynctask flusher``: applies the tracking stream outside the Celery workers."""
        command = [sys.executable, "-m", "asynctask", "flusher"]
        proc = subprocess.Popen(command, env=self.worker_env(), cwd=ROOT, start_new_session=True)
        self.procs.append(proc)
        return proc

    def stop_workers(self) -> None:
        stop_groups(self.procs, 15)

    def runs_of(self, event: str) -> list[tuple[str, int, float]]:
        """(jid, pid, time) of each line ``event`` the jobs wrote."""
        found = []
        for line in written_lines(self.runs):
            kind, jid, pid, at = line.split()
            if kind == event:
                found.append((jid, int(pid), float(at)))
        return found


@contextmanager
def celery_rig(
    setup: str, claimed_db: int, tmp_path: Path, database_url: str | None = None
) -> Iterator[CeleryRig]:
    """The rig; tracking in ``database_url`` when given (a private server), else in a fresh
    schema of the shared one."""
    queue = f"attest-celery-{uuid.uuid4().hex[:10]}"
    with ExitStack() as stack:
        database_url = database_url or stack.enter_context(fresh_postgres_schema())
        upgrade(database_url)
        if setup == "rabbitmq-sql":
            # No Redis anywhere: the SQL broker's store for cancellations, the writer thread for tracking.
            settings = Settings(database_url=database_url)
        else:
            settings = Settings(redis_url=db_url(claimed_db), namespace=queue, database_url=database_url)
        broker = db_url(claimed_db) if setup == "redis" else RABBITMQ_URL
        engine = create_database_engine(database_url)
        stack.callback(engine.dispose)
        registry = Registry()
        client = Client(settings, registry=registry)
        stack.callback(client.close)
        stack.callback(close_shared)
        config = {"settings": settings, "stream_interval": 0.05, "token_cache_seconds": 0.0}
        api = create_app(config, client=client, engine=engine)
        api.testing = True
        stack.callback(lambda: api.extensions[EXTENSION].watcher.close())
        app = make_app(broker, queue)
        stack.callback(app.close)
        if setup != "redis":
            stack.callback(_delete_queue, app, queue)
        token = create_token(engine, TENANT).token
        rig = CeleryRig(
            broker,
            queue,
            settings,
            engine,
            client,
            registry,
            app,
            api,
            api.test_client(),
            token,
            tmp_path / "runs.txt",
        )
        stack.callback(rig.stop_workers)
        yield rig


def _delete_queue(app: Celery, queue: str) -> None:
    with app.connection_for_write() as connection:
        connection.default_channel.queue_delete(queue)
