"""Flow-control options: declared on a job or per push, resolved by the client into payload keys.

The jobs are captured by a client middleware that drops them, so these tests see exactly
what a broker would be given and depend on no broker's handling of the keys.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import pytest

import asynctask
from asynctask import Client, Registry, Settings
from asynctask.errors import PayloadError
from asynctask.flow import parse_rate
from asynctask.middleware import Chain
from asynctask.payload import loads


@pytest.fixture
def captured() -> list[dict[str, Any]]:
    return []


@pytest.fixture
def capturing(
    redis_settings: Settings, registry: Registry, conn: Any, captured: list[dict[str, Any]]
) -> Client:
    def capture(job: dict[str, Any], queue: str, call_next: Callable[[], Any]) -> Any:
        captured.append(dict(job))
        return None

    return Client(redis_settings, connection=conn, registry=registry, middleware=Chain([capture]))


def flow_keys(job: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in job.items() if k.startswith(("concurrency_", "rate_", "unique_"))}


def test_a_key_template_is_formatted_with_the_arguments_by_name(
    registry: Registry, capturing: Client, captured: list[dict[str, Any]]
) -> None:
    @asynctask.job(registry=registry, concurrency_key="device:{device_id}")
    def install(app: str, device_id: int, force: bool = False) -> None: ...

    install.set(client=capturing).perform_async("mail", 42)
    assert flow_keys(captured[0]) == {"concurrency_key": "device:42", "concurrency_limit": 1}


def test_a_key_can_name_arguments_by_position_or_be_a_callable(
    registry: Registry, capturing: Client, captured: list[dict[str, Any]]
) -> None:
    @asynctask.job(registry=registry, concurrency_key="{1}/{0}", concurrency_limit=3)
    def by_position(a: str, b: str) -> None: ...

    @asynctask.job(
        registry=registry, concurrency_key=lambda a, b: f"{a}{b}", concurrency_on_failure="continue"
    )
    def by_function(a: str, b: str) -> None: ...

    by_position.set(client=capturing).perform_async("x", "y")
    by_function.set(client=capturing).perform_async("x", "y")
    assert flow_keys(captured[0]) == {"concurrency_key": "y/x", "concurrency_limit": 3}
    assert flow_keys(captured[1]) == {
        "concurrency_key": "xy",
        "concurrency_limit": 1,
        "concurrency_on_failure": "continue",
    }


def test_set_overrides_the_declared_options_per_push(
    registry: Registry, capturing: Client, captured: list[dict[str, Any]]
) -> None:
    @asynctask.job(registry=registry, concurrency_key="device:{device_id}")
    def install(device_id: int) -> None: ...

    install.set(client=capturing, concurrency_key="operator:7", concurrency_limit=2).perform_async(1)
    install.set(client=capturing, queue="low").perform_async(2)
    assert flow_keys(captured[0]) == {"concurrency_key": "operator:7", "concurrency_limit": 2}
    assert flow_keys(captured[1]) == {"concurrency_key": "device:2", "concurrency_limit": 1}
    assert captured[1]["queue"] == "low"


def test_rate_and_unique_defaults(
    registry: Registry, capturing: Client, captured: list[dict[str, Any]]
) -> None:
    @asynctask.job(registry=registry, rate_limit="20/s", unique_for=60)
    def call_api(path: str) -> None: ...

    call_api.set(client=capturing).perform_async("/a")
    call_api.set(client=capturing, unique_until="start", rate_key="api:{path}").perform_async("/b")
    digest = hashlib.sha256(json.dumps(["/a"]).encode()).hexdigest()
    assert flow_keys(captured[0]) == {
        "rate_limit": "20/s",
        "rate_key": "call_api",
        "unique_key": f"call_api:{digest}",
        "unique_for": 60,
    }
    assert flow_keys(captured[1])["rate_key"] == "api:/b"
    assert flow_keys(captured[1])["unique_until"] == "start"
    assert flow_keys(captured[1])["unique_key"] != flow_keys(captured[0])["unique_key"]


def test_client_push_resolves_templates_and_push_bulk_resolves_each_job(
    registry: Registry, capturing: Client, captured: list[dict[str, Any]]
) -> None:
    @asynctask.job(registry=registry, concurrency_key="device:{device_id}")
    def install(device_id: int) -> None: ...

    capturing.push({"class": "install", "args": [5]})
    capturing.push({"class": "RubyJob", "args": ["a"], "concurrency_key": "op:{0}", "concurrency_limit": 2})
    install.set(client=capturing).perform_bulk([[1], [2]])
    assert [j["concurrency_key"] for j in captured] == ["device:5", "op:a", "device:1", "device:2"]
    assert captured[1]["concurrency_limit"] == 2
    assert all(loads(json.dumps(j)) for j in captured)


def test_options_that_cannot_work_are_refused_when_declared(registry: Registry) -> None:
    bad: list[dict[str, Any]] = [
        {"concurrency_limit": 2},
        {"concurrency_key": "k", "concurrency_limit": 0},
        {"concurrency_key": "k", "concurrency_on_failure": "skip"},
        {"rate_limit": "10/d"},
        {"rate_limit": "0/s"},
        {"rate_key": "k"},
        {"unique_for": 0},
        {"unique_until": "start"},
        {"unique_for": 5, "unique_until": "end"},
        {"concurrency_key": ""},
    ]
    for options in bad:
        with pytest.raises(ValueError):
            asynctask.job(registry=registry, **options)(lambda: None)


def test_a_key_that_cannot_be_resolved_is_refused_at_push(registry: Registry, capturing: Client) -> None:
    @asynctask.job(registry=registry, concurrency_key="device:{device}")
    def install(device_id: int) -> None: ...

    with pytest.raises(ValueError, match="concurrency_key"):
        install.set(client=capturing).perform_async(1)


def test_rates_parse_to_starts_per_window() -> None:
    assert parse_rate("10/s") == (10, 1.0)
    assert parse_rate("600/m") == (600, 60.0)
    assert parse_rate("100/h") == (100, 3600.0)
    for bad in ("10", "10/sec", "-1/s", "1.5/s", 10, "10/s "):
        with pytest.raises(ValueError):
            parse_rate(bad)


@pytest.mark.parametrize(
    "fields",
    [
        {"concurrency_key": 7, "concurrency_limit": 1},
        {"concurrency_key": "k", "concurrency_limit": 0},
        {"concurrency_key": "k", "concurrency_limit": True},
        {"concurrency_key": "k" * 1001},
        {"rate_limit": "fast", "rate_key": "k"},
        {"rate_limit": "1/s"},
        {"unique_key": "k", "unique_for": "soon"},
        {"unique_key": "k", "unique_for": 5, "unique_until": "never"},
    ],
)
def test_a_payload_with_flow_keys_no_broker_can_act_on_is_not_a_job(fields: dict[str, Any]) -> None:
    raw = json.dumps({"class": "X", "args": [], "jid": "j", **fields})
    with pytest.raises(PayloadError):
        loads(raw)


def test_templates_bind_by_the_jobs_own_signature_whatever_the_clients_registry(
    redis_settings: Settings, conn: Any, captured: list[dict[str, Any]]
) -> None:
    def capture(job: dict[str, Any], queue: str, call_next: Callable[[], Any]) -> Any:
        captured.append(dict(job))
        return None

    elsewhere = Client(redis_settings, connection=conn, registry=Registry(), middleware=Chain([capture]))

    @asynctask.job(registry=Registry(), concurrency_key="device:{device_id}")
    def install(device_id: int) -> None: ...

    install.set(client=elsewhere).perform_async(3)
    install.set(client=elsewhere).perform_bulk([[4]])
    assert [j["concurrency_key"] for j in captured] == ["device:3", "device:4"]
