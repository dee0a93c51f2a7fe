"""``GET /metrics``: the broker's state in Prometheus' text format, for operators only, on the
Redis broker and on the SQL broker (SQLite and PostgreSQL)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import redis
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import event

from asynctask import Client, payload
from asynctask.api import DeadSet
from asynctask.api.context import shared_engine
from asynctask.brokers.redis import RedisBroker
from asynctask.brokers.sql.broker import SqlBroker
from asynctask.tokens import create_token
from tests.webapi.conftest import Api, MakeApi
from tests.webapi.test_api import error_of

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

    samples = scraped(api)

    assert samples[("asynctask_queue_size", (("queue", "mail"),))] == 3
    assert samples[("asynctask_queue_size", (("queue", "default"),))] == 1
    assert 0.3 <= samples[("asynctask_queue_latency_seconds", (("queue", "mail"),))] < 30
    assert samples[("asynctask_queue_latency_seconds", (("queue", "default"),))] < 0.3
    assert samples[("asynctask_set_size", (("set", "dead"),))] == 1
    assert samples[("asynctask_set_size", (("set", "retry"),))] == 0
    assert samples[("asynctask_jobs_processed_total", ())] == 0
    assert samples[("asynctask_processes", ())] == 0
    tracked = ("asynctask_tracking_backlog", ()) in samples
    assert tracked == isinstance(api.client.broker, RedisBroker)


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
