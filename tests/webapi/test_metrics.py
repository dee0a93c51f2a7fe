"""``GET /metrics``: the broker's state in Prometheus' text format, for operators only, on the
Redis broker and on the SQL broker (SQLite and PostgreSQL)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine, event, insert

import asynctask
from asynctask import Client, Registry, Tracking, payload
from asynctask.api import DeadSet
from asynctask.api.reader import shared_engine
from asynctask.brokers.base import Beat
from asynctask.brokers.redis import RedisBroker
from asynctask.brokers.sql.broker import SqlBroker
from asynctask.tasks.creation import new_task_id
from asynctask.tokens import create_token
from asynctask.tracking.models import Event, Task
from asynctask.tracking.status import EventStatus, TaskStatus
from tests.conftest import REDIS_URL, wait_until
from tests.processes import free_port
from tests.webapi.conftest import Api, MakeApi
from tests.webapi.test_api import error_of
from tests.webapi.test_server import ROOT, Server

OPERATORS = ("ops",)


def scraped(api: Api) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape by an operator: (name, sorted labels) -> value."""
    response = api.get("/metrics", _operator(api))
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.mimetype == "text/plain"
    samples = {}
    for family in text_string_to_metric_families(response.get_data(as_text=True)):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def _operator(api: Api) -> str:
    return create_token(api.engine, "ops").token


def push(client: Client, queue: str, count: int) -> None:
    for n in range(count):
        client.push({"class": "Export", "args": [n], "queue": queue})


def failed_job() -> payload.JobDict:
    return {
        "class": "Export",
        "args": [],
        "queue": "default",
        "jid": payload.new_jid(),
        "error_class": "RuntimeError",
        "error_message": "boom",
        "retry_count": 0,
        "failed_at": payload.now(),
    }


def test_an_operator_reads_queues_sets_and_counters(make: MakeApi) -> None:
    api = make(operator_tenants=OPERATORS)
    push(api.client, "mail", 3)
    time.sleep(0.3)
    push(api.client, "default", 1)
    DeadSet(settings=api.client.settings).kill(failed_job())
    parked = api.client.push({"class": "Parked", "args": [], "queue": "parked"})
    assert parked is not None and Tracking(api.client, api.engine).stop_job(parked) == "stopped"

    samples = scraped(api)

    assert samples[("asynctask_queue_size", (("queue", "mail"),))] == 3
    assert samples[("asynctask_queue_size", (("queue", "default"),))] == 1
    mail_latency = samples[("asynctask_queue_latency_seconds", (("queue", "mail"),))]
    default_latency = samples[("asynctask_queue_latency_seconds", (("queue", "default"),))]
    assert 0.3 <= mail_latency < 30
    # Each queue's own oldest job: mail's waited the 0.3 s more, however slow the steps after it
    # (a loaded machine can take longer than that to scrape).
    assert 0 <= default_latency <= mail_latency - 0.29
    assert samples[("asynctask_set_size", (("set", "dead"),))] == 1
    assert samples[("asynctask_set_size", (("set", "retry"),))] == 0
    assert samples[("asynctask_set_size", (("set", "stopped"),))] == 1
    assert samples[("asynctask_jobs_processed_total", ())] == 0
    assert samples[("asynctask_processes", ())] == 0
    tracked = ("asynctask_tracking_backlog", ()) in samples
    assert tracked == isinstance(api.client.broker, RedisBroker)


def test_each_process_reports_its_event_loop_lag(make: MakeApi) -> None:
    api = make(operator_tenants=OPERATORS)
    info = '{"hostname":"box","pid":7,"concurrency":10,"queues":["default"]}'
    for identity, lag_us in (("box:7:aa", 250_000), ("box:8:bb", 0)):
        api.client.broker.beat(Beat(identity, info, 0, False, 1024, 0, 0, {}, lag_us))

    samples = scraped(api)

    lag = "asynctask_process_event_loop_lag_seconds"
    assert samples[(lag, (("hostname", "box"), ("identity", "box:7:aa")))] == 0.25
    assert samples[(lag, (("hostname", "box"), ("identity", "box:8:bb")))] == 0


def test_a_tenant_token_is_refused_and_no_token_is_unauthorized(make: MakeApi) -> None:
    api = make(operator_tenants=OPERATORS)
    response = api.get("/metrics", api.acme)
    assert (response.status_code, error_of(response)["code"]) == (403, "operator_only")
    response = api.http.get("/metrics")
    assert (response.status_code, error_of(response)["code"]) == (401, "unauthorized")


@contextmanager
def round_trips(api: Api) -> Iterator[list[str]]:
    """The broker's round trips while the block runs: Redis commands sent (a pipeline counts
    once) or SQL statements executed."""
    sent: list[str] = []
    broker = api.client.broker
    if isinstance(broker, RedisBroker):
        original: Callable[..., None] = redis.connection.AbstractConnection.send_packed_command

        def send(self: Any, command: Any, check_health: bool = True) -> None:
            sent.append("redis")
            original(self, command, check_health)

        redis.connection.AbstractConnection.send_packed_command = send  # type: ignore[method-assign]
        try:
            yield sent
        finally:
            redis.connection.AbstractConnection.send_packed_command = original  # type: ignore[method-assign]
        return
    assert isinstance(broker, SqlBroker)

    def executed(*_args: object) -> None:
        sent.append("sql")

    engine = shared_engine(api.client.settings.broker)
    event.listen(engine, "before_cursor_execute", executed)
    try:
        yield sent
    finally:
        event.remove(engine, "before_cursor_execute", executed)


def test_a_scrape_costs_the_same_round_trips_whatever_the_number_of_jobs(make: MakeApi) -> None:
    api = make(operator_tenants=OPERATORS)
    token = _operator(api)
    push(api.client, "mail", 2)
    api.get("/metrics", token)  # connections opened, statements prepared
    with round_trips(api) as few:
        assert api.get("/metrics", token).status_code == 200
    push(api.client, "mail", 500)
    for _ in range(50):
        DeadSet(settings=api.client.settings).kill(failed_job())
    with round_trips(api) as many:
        assert api.get("/metrics", token).status_code == 200
    assert 0 < len(many) == len(few) <= 12, (few, many)


# --- tasks by status ---------------------------------------------------------------------------


def test_tasks_by_status_are_what_the_read_api_reports(
    make_api: MakeApi, registry: Registry, start_tracked_worker: Any
) -> None:
    api = make_api(operator_tenants=OPERATORS)
    gate = threading.Event()

    @asynctask.job(registry=registry)
    def held(items: list[Any]) -> None:
        gate.wait(30)

    tracking = Tracking(api.client, api.engine)
    cancelled = api.post_json({"job": "echo", "items": [1, 2, 3]}).get_json()["task_id"]
    assert api.post(f"/api/tasks/{cancelled}/cancel").status_code == 200
    # No worker reads "later": its task waits.
    tracking.create_task("echo", [1], tenant="acme", queue="later")
    running = tracking.create_task("held", [1], tenant="acme").id
    finished = api.post_json({"job": "echo", "items": [1, 2]}).get_json()["task_id"]
    rows = [{"sku": "A", "price": "1"}, {"sku": "NEG", "price": "-1"}]
    with_errors = api.post_json({"job": "import_products", "items": rows}).get_json()["task_id"]
    start_tracked_worker(max_retries=0)
    try:
        api.wait_settled(finished)
        api.wait_settled(with_errors)
        wait_until(lambda: api.get(f"/api/tasks/{running}").get_json()["counts"]["working"] == 1)

        reported = Counter(task["status"] for task in api.get("/api/tasks").get_json()["items"])
        samples = scraped(api)
    finally:
        gate.set()

    counted = {labels[0][1]: value for (name, labels), value in samples.items() if name == "asynctask_tasks"}
    assert counted == {status.value: reported[status.value] for status in TaskStatus}
    assert reported == {"cancelled": 1, "pending": 1, "running": 1, "finished": 1, "finished_with_errors": 1}


def test_a_scrape_reads_the_tasks_in_one_statement_whatever_their_number(make: MakeApi) -> None:
    api = make(operator_tenants=OPERATORS)
    token = _operator(api)
    add_tasks(api.engine, 10)
    api.get("/metrics", token)  # connections opened, statements prepared
    with statements(api.engine) as few:
        assert api.get("/metrics", token).status_code == 200
    add_tasks(api.engine, 990)
    with statements(api.engine) as many:
        assert api.get("/metrics", token).status_code == 200
    assert len(many) == len(few) <= 3, (few, many)
    assert len([sql for sql in many if "asynctask_task" in sql]) == 1, many
    assert not [sql for sql in many if "asynctask_event" in sql], many
    assert scraped(api)[("asynctask_tasks", (("status", "running"),))] == 1000


def add_tasks(engine: Engine, count: int) -> None:
    """``count`` running tasks of 100 jobs, each with an event."""
    now = datetime.now(UTC)
    ids = [new_task_id() for _ in range(count)]
    counts = {f"count_{status}": 0 for status in EventStatus}
    with engine.begin() as connection:
        connection.execute(
            insert(Task),
            [
                {
                    "id": task_id,
                    "job_name": "echo",
                    "queue": "default",
                    "state": "ready",
                    "total": 100,
                    "chunk_size": 1,
                    "created_at": now,
                    "started_at": now,
                    **counts,
                    "count_working": 1,
                    "count_enqueue": 99,
                }
                for task_id in ids
            ],
        )
        connection.execute(
            insert(Event),
            [{"job_id": payload.new_jid(), "task_id": task_id, "status": "working"} for task_id in ids],
        )


@contextmanager
def statements(engine: Engine) -> Iterator[list[str]]:
    """The SQL statements run on ``engine`` while the block runs."""
    ran: list[str] = []

    def executed(_connection: object, _cursor: object, sql: str, *_args: object) -> None:
        ran.append(sql)

    event.listen(engine, "before_cursor_execute", executed)
    try:
        yield ran
    finally:
        event.remove(engine, "before_cursor_execute", executed)


# --- request durations -------------------------------------------------------------------------

DURATIONS = "asynctask_http_request_duration_seconds"


def durations(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], suffix: str
) -> dict[tuple[str, str, str], float]:
    """(endpoint, method, status) -> the histogram's ``_count`` or ``_sum``."""
    found = {}
    for (name, labels), value in samples.items():
        if name == DURATIONS + suffix:
            named = dict(labels)
            found[(named["endpoint"], named["method"], named["status"])] = value
    return found


def test_requests_are_counted_by_route_method_and_status(make_api: MakeApi) -> None:
    api = make_api(operator_tenants=OPERATORS)
    task_id = api.post_json({"job": "echo", "items": [1]}).get_json()["task_id"]
    for _ in range(3):
        assert api.get(f"/api/tasks/{task_id}").status_code == 200
    assert api.get("/api/tasks/no-such-task").status_code == 404
    assert api.get("/no/such/page").status_code == 404
    assert api.get("/another/unknown/page").status_code == 404
    assert api.http.open("/api/tasks", method="BREW").status_code == 405

    counted = durations(scraped(api), "_count")

    assert counted == {
        ("/api/tasks", "POST", "202"): 1,
        ("/api/tasks/<task_id>", "GET", "200"): 3,
        ("/api/tasks/<task_id>", "GET", "404"): 1,
        ("unmatched", "GET", "404"): 2,
        ("unmatched", "other", "405"): 1,
    }
    buckets = [
        (labels, value) for (name, labels), value in scraped(api).items() if name == DURATIONS + "_bucket"
    ]
    assert buckets and all(dict(labels)["endpoint"] != "/no/such/page" for labels, _ in buckets)


def test_a_request_is_timed_through_every_hook_and_the_teardown(make_api: MakeApi) -> None:
    api = make_api(operator_tenants=OPERATORS)
    api.app.before_request(lambda: time.sleep(0.1))
    api.app.teardown_appcontext(lambda _exc: time.sleep(0.2))
    started = time.perf_counter()
    assert api.http.get("/healthz").status_code == 200
    waited = time.perf_counter() - started

    timed = durations(scraped(api), "_sum")[("/healthz", "GET", "200")]

    assert 0.3 <= timed <= waited


def test_every_worker_process_of_asynctask_api_reports_every_request(
    tmp_path: Path, namespace: str, conn: redis.Redis
) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {
        **os.environ,
        "ASYNCTASK_REDIS_URL": REDIS_URL,
        "ASYNCTASK_NAMESPACE": namespace,
        "ASYNCTASK_DATABASE_URL": f"sqlite:///{tmp_path / 'api.db'}",
        "ASYNCTASK_REQUIRE": "tests.jobs.api_jobs",
        "ASYNCTASK_API_OPERATOR_TENANTS": "ops",
        "PYTHONPATH": str(ROOT),
        # Where the server makes its private metrics directory, so that the test can see it.
        "TMPDIR": str(temp),
    }
    cli = [sys.executable, "-m", "asynctask"]
    subprocess.run([*cli, "db", "upgrade"], env=env, check=True, capture_output=True, cwd=ROOT)
    made = subprocess.run(
        [*cli, "tokens", "create", "--tenant", "ops"], env=env, check=True, capture_output=True, text=True
    )
    port = free_port()
    command = [*cli, "api", "--port", str(port), "--workers", "2", "--threads", "2"]
    process = subprocess.Popen(command, env=env, cwd=ROOT)
    server = Server(port, made.stdout.splitlines()[0])
    try:
        wait_until(lambda: _answers(server), 30, interval=0.1)
        (directory,) = temp.glob("asynctask-api-metrics-*")
        # Each request on a new connection, until both workers have answered some: each writes
        # its own file, named by its pid.
        sent = 0
        # Bounded in time, not in requests: a worker that boots slowly on a busy machine gets
        # none until it accepts.
        deadline = time.monotonic() + 60
        while len(list(directory.glob("histogram_*.db"))) < 2:
            assert time.monotonic() < deadline, f"the {sent} requests all went to one worker"
            assert server.request("GET", "/api/jobs")[0] == 200
            sent += 1
        sent += 20
        for _ in range(20):
            assert server.request("GET", "/api/jobs")[0] == 200

        # Each scrape is answered by either worker.
        for _ in range(10):
            assert jobs_requests(server) == sent

        # A worker that exits is replaced; what it counted still counts, and the directory
        # stays for the others.
        first = min(int(path.stem.split("_")[1]) for path in directory.glob("histogram_*.db"))
        os.kill(first, signal.SIGTERM)
        wait_until(lambda: not Path(f"/proc/{first}").exists(), 30)
        for _ in range(20):
            assert server.request("GET", "/api/jobs")[0] == 200
        sent += 20
        for _ in range(10):
            assert jobs_requests(server) == sent
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    assert list(temp.iterdir()) == [], "the metrics directory is removed at exit"


def jobs_requests(server: Server) -> float:
    """How many ``GET /api/jobs`` requests a scrape of ``server`` reports."""
    status, _, body = server.request("GET", "/metrics")
    assert status == 200
    (counted,) = [
        sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
        if sample.name == DURATIONS + "_count" and sample.labels["endpoint"] == "/api/jobs"
    ]
    return counted


def _answers(server: Server) -> bool:
    try:
        return server.request("GET", "/healthz")[0] == 200
    except OSError:
        return False
