"""Redis's registry of in-flight lists: a list holding a job is always registered, so that
a live process can return its jobs if its owner dies."""

from __future__ import annotations

from asynctask import Settings
from asynctask.brokers.redis import RedisBroker


def test_a_claim_registers_its_in_flight_list(redis_settings: Settings) -> None:
    broker = RedisBroker(redis_settings)
    try:
        keys = broker.keys
        for path in ("claim", "wait"):
            fetch = broker.fetcher(f"proc-{path}")
            broker.push([({"class": "X", "args": [], "jid": path, "queue": "default", "retry": True}, None)])
            unit = fetch.claim(1, [], [])[0] if path == "claim" else fetch.wait(0)
            assert unit is not None
            assert broker.redis.hget(keys.inflight_registry, str(unit.ref)) == f"proc-{path}".encode()
    finally:
        broker.close()


def test_leaving_unregisters_for_good(redis_settings: Settings) -> None:
    broker = RedisBroker(redis_settings)
    try:
        fetch = broker.fetcher("leaving")
        fetch.register()
        fetch.requeue_all(forget=True)
        # A heartbeat still under way at shutdown must not register the lists again.
        fetch.register()
        assert not broker.redis.hlen(broker.keys.inflight_registry)
    finally:
        broker.close()
