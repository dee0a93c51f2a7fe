"""create_task with a concurrency key: chunks of one key each, the key and limit in every chunk's
payload, the tenant's own keys, the "waiting for" message, and bad keys refused before anything
is written."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from sqlalchemy import Engine, func, select, update

from asynctask import Registry, Tracking, job
from asynctask.payload import JobDict
from asynctask.tasks import creation
from asynctask.tasks.itemkeys import ItemKey, ItemKeyError, TemplateError, tenant_prefix
from asynctask.tracking.models import Event, EventMessage
from asynctask.tracking.outbox import pack
from asynctask.tracking.transitions import decode_entry
from tests.conftest import recorded_pushes
from tests.tracking_fixtures import tracked_rows


@pytest.fixture
def rows(registry: Registry) -> Any:
    @job(registry=registry)
    def rows(items: list[Any]) -> None:
        pass

    return rows


def test_chunks_hold_one_key_each_and_keep_the_order_of_each_keys_items(
    redis_tracking: Tracking, rows: Any
) -> None:
    seen = recorded_pushes(redis_tracking.client)
    items = [{"op": op, "n": n} for n, op in enumerate("aabbabaaa")]
    task = redis_tracking.create_task(
        rows, items, chunk_size=2, concurrency_key="operator:{op}", concurrency_limit=3
    )
    chunks = [(j["concurrency_key"], [i["n"] for i in j["args"][0]], j["concurrency_limit"]) for j in seen]
    assert chunks == [
        ("operator:a", [0, 1], 3),
        ("operator:b", [2, 3], 3),
        ("operator:a", [4, 6], 3),
        ("operator:b", [5], 3),
        ("operator:a", [7, 8], 3),
    ]
    assert task.total == 5
    # The options stand where Sidekiq's client writes a job's options: before args.
    assert list(seen[0])[list(seen[0]).index("args") - 2 :][:2] == ["concurrency_key", "concurrency_limit"]


def test_keys_are_grouped_within_each_batch_and_batches_keep_their_order(
    redis_tracking: Tracking, rows: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(creation, "BATCH", 4)
    seen = recorded_pushes(redis_tracking.client)
    items = [{"k": k, "n": n} for n, k in enumerate("xyxyxyxy")]
    redis_tracking.create_task(rows, items, chunk_size=4, concurrency_key="{k}")
    assert [(j["concurrency_key"], [i["n"] for i in j["args"][0]]) for j in seen] == [
        ("x", [0, 2]),
        ("y", [1, 3]),
        ("x", [4, 6]),
        ("y", [5, 7]),
    ]


def test_without_a_key_chunks_and_payloads_are_unchanged(redis_tracking: Tracking, rows: Any) -> None:
    seen = recorded_pushes(redis_tracking.client)
    redis_tracking.create_task(rows, [{"op": "a"}, {"op": "b"}, {"op": "a"}], chunk_size=2)
    assert [j["args"][0] for j in seen] == [[{"op": "a"}, {"op": "b"}], [{"op": "a"}]]
    assert not any("concurrency_key" in j or "concurrency_limit" in j for j in seen)


def test_a_tenants_keys_are_its_own(redis_tracking: Tracking, rows: Any) -> None:
    seen = recorded_pushes(redis_tracking.client)
    redis_tracking.create_task(rows, [{"op": 7}], concurrency_key="operator:{op}", tenant="acme")
    redis_tracking.create_task(rows, [{"op": 7}], concurrency_key="operator:{op}", tenant='ac"me/x')
    redis_tracking.create_task(rows, [{"op": 7}], concurrency_key="operator:{op}")
    keys = [j["concurrency_key"] for j in seen]
    assert keys == ['"acme"/operator:7', '"ac\\"me/x"/operator:7', "operator:7"]
    assert not '"acme"/operator:7'.startswith(tenant_prefix('ac"me/x'))


def test_a_keyed_chunk_is_enqueue_with_one_waiting_message(
    redis_tracking: Tracking, rows: Any, database_engine: Engine
) -> None:
    task = redis_tracking.create_task(
        rows, [{"op": 1}, {"op": 2}, {"op": 1}], chunk_size=5, concurrency_key="op-{op}", tenant="acme"
    )
    events = redis_tracking.list_events(task.id).items
    assert [(e.status, [m.text for m in e.messages]) for e in events] == [
        ("enqueue", ["waiting for op-1"]),
        ("enqueue", ["waiting for op-2"]),
    ]
    plain = redis_tracking.create_task(rows, [{"op": 1}])
    assert [e.messages for e in redis_tracking.list_events(plain.id).items] == [()]
    with database_engine.connect() as connection:
        assert connection.execute(select(func.count()).select_from(EventMessage)).scalar() == 2


def test_a_key_function_gets_each_item(redis_tracking: Tracking, rows: Any) -> None:
    seen = recorded_pushes(redis_tracking.client)
    redis_tracking.create_task(rows, [3, 4, 5], chunk_size=3, concurrency_key=lambda n: f"parity:{n % 2}")
    assert [(j["concurrency_key"], j["args"][0]) for j in seen] == [("parity:1", [3, 5]), ("parity:0", [4])]


@pytest.mark.parametrize(
    ("items", "options", "error", "match"),
    [
        ([{"op": 1}, {"x": 2}], {"concurrency_key": "op:{op}"}, ItemKeyError, r"items\[1\].*no field 'op'"),
        ([{"op": None}], {"concurrency_key": "op:{op}"}, ItemKeyError, "null, not a string"),
        ([{"op": {"a": 1}}], {"concurrency_key": "op:{op}"}, ItemKeyError, "an object"),
        ([[1]], {"concurrency_key": "op:{op}"}, ItemKeyError, "an array, not an object"),
        ([{"op": "x" * 1000}], {"concurrency_key": "op:{op}"}, ItemKeyError, "longer than 1000"),
        ([{"op": ""}], {"concurrency_key": "{op}"}, ItemKeyError, "empty"),
        ([1], {"concurrency_key": lambda item: 5}, ItemKeyError, "returned int"),
        ([{"op": 1}], {"concurrency_key": "op:{op.real}"}, TemplateError, "only name item fields"),
        ([{"op": 1}], {"concurrency_key": "op:{op[0]}"}, TemplateError, "only name item fields"),
        ([{"op": 1}], {"concurrency_key": "op:{op!r}"}, TemplateError, "only name item fields"),
        ([{"op": 1}], {"concurrency_key": "op:{op:>5}"}, TemplateError, "only name item fields"),
        ([{"op": 1}], {"concurrency_key": "op:{}"}, TemplateError, "only name item fields"),
        ([{"op": 1}], {"concurrency_key": "op:{0}"}, TemplateError, "only name item fields"),
        ([{"op": 1}], {"concurrency_key": "op:{op"}, TemplateError, "not a valid template"),
        ([{"op": 1}], {"concurrency_key": ""}, TemplateError, "empty"),
        ([{"op": 1}], {"concurrency_key": "k", "concurrency_limit": 0}, ValueError, "concurrency_limit"),
        ([{"op": 1}], {"concurrency_key": "k", "concurrency_limit": True}, ValueError, "concurrency_limit"),
    ],
)
def test_a_bad_key_or_limit_writes_nothing(
    redis_tracking: Tracking,
    rows: Any,
    database_engine: Engine,
    conn: redis.Redis,
    namespace: str,
    items: list[Any],
    options: dict[str, Any],
    error: type[Exception],
    match: str,
) -> None:
    with pytest.raises(error, match=match):
        redis_tracking.create_task(rows, items, **options)
    assert tracked_rows(database_engine) == (0, 0)
    assert conn.llen(f"{namespace}:queue:default") == 0


def test_numbers_are_spelled_as_json_would() -> None:
    key = ItemKey("{a}-{b}")
    assert key({"a": 7, "b": 1.5}) == "7-1.5"
    assert ItemKey("constant")({"anything": 1}) == "constant"
    assert ItemKey("{a}", tenant="t")({"a": "x"}) == '"t"/x'


def test_the_jobs_own_key_and_rate_apply_to_each_chunk_but_not_its_uniqueness(
    redis_tracking: Tracking, registry: Registry
) -> None:
    @job(
        registry=registry,
        concurrency_key=lambda items: f"first:{items[0]}",
        concurrency_limit=2,
        rate_limit="5/s",
        unique_for=60,
    )
    def limited(items: list[int]) -> None:
        pass

    seen = recorded_pushes(redis_tracking.client)
    task = redis_tracking.create_task(limited, [1, 2, 3], chunk_size=2)
    flow = [{k: v for k, v in j.items() if k.startswith(("concurrency", "rate", "unique"))} for j in seen]
    assert flow == [
        {"concurrency_key": "first:1", "concurrency_limit": 2, "rate_limit": "5/s", "rate_key": "limited"},
        {"concurrency_key": "first:3", "concurrency_limit": 2, "rate_limit": "5/s", "rate_key": "limited"},
    ]
    assert [[m.text for m in e.messages] for e in redis_tracking.list_events(task.id).items] == [
        ["waiting for first:1"],
        ["waiting for first:3"],
    ]
    seen.clear()
    redis_tracking.create_task(
        limited, [{"d": 1}], concurrency_key="d{d}", concurrency_limit=4, concurrency_on_failure="continue"
    )
    (only,) = seen
    assert [k for k in only if k.startswith(("concurrency", "rate"))] == [
        "concurrency_key",
        "concurrency_limit",
        "concurrency_on_failure",
        "rate_limit",
        "rate_key",
    ]
    assert (only["concurrency_key"], only["concurrency_limit"], only["concurrency_on_failure"]) == (
        "d1",
        4,
        "continue",
    )
    with pytest.raises(ValueError, match="concurrency_on_failure"):
        redis_tracking.create_task(limited, [{"d": 1}], concurrency_key="k", concurrency_on_failure="later")


def test_retry_task_pushes_each_job_again_with_its_key_limit_and_rate(
    redis_tracking: Tracking, registry: Registry, database_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    @job(registry=registry, rate_limit="3/m")
    def metered(items: list[dict[str, int]]) -> None:
        pass

    task = redis_tracking.create_task(
        metered, [{"d": 1}, {"d": 2}], concurrency_key="d{d}", concurrency_limit=2, tenant="acme"
    )
    plain = redis_tracking.create_task(metered, [{"d": 3}])
    with database_engine.begin() as connection:
        connection.execute(update(Event).values(status="failed"))
    pushed: list[JobDict] = []
    recorded: list[str] = []
    push = redis_tracking.client.broker.push

    def record(entries: Any, **kwargs: Any) -> Any:
        pushed.extend(job for job, _ in entries)
        recorded.extend(kwargs["transitions"])
        return push(entries, **kwargs)

    monkeypatch.setattr(redis_tracking.client.broker, "push", record)
    assert redis_tracking.retry_task(task.id) == 2
    assert redis_tracking.retry_task(plain.id) == 1
    flow = [{k: v for k, v in j.items() if k.startswith(("concurrency", "rate"))} for j in pushed]
    rate = {"rate_limit": "3/m", "rate_key": "metered"}
    assert flow == [
        {"concurrency_key": '"acme"/d1', "concurrency_limit": 2, **rate},
        {"concurrency_key": '"acme"/d2', "concurrency_limit": 2, **rate},
        rate,
    ]
    # Where the client writes them: before args.
    assert list(pushed[0]).index("rate_key") < list(pushed[0]).index("args")
    # The enqueue recorded with the push says which key the job may wait for again.
    assert [t.text for t in decode_entry(1, pack(recorded))] == [
        "retried by request; waiting for d1",
        "retried by request; waiting for d2",
        "retried by request",
    ]
