"""Readers of the Redis broker's keys, for the suites that check its scripts at the keys."""

from __future__ import annotations

import json

from asynctask.brokers.redis import RedisBroker


def jids(raws: list[bytes]) -> list[str]:
    return [json.loads(raw)["jid"] for raw in raws]


def queued(broker: RedisBroker, queue: str = "default") -> list[str]:
    """Jids in a queue, next to run first."""
    return jids(broker.redis.lrange(broker.keys.queue(queue), 0, -1))[::-1]


def entry_jids(broker: RedisBroker, key: str) -> list[str]:
    """Jids of the entries of a held list or a line, next first, each entry's header checked
    against its payload (entries are ``<length>:<jid><length>:<queue><payload>``)."""
    found = []
    for entry in broker.redis.lrange(key, 0, -1):
        size, _, rest = entry.partition(b":")
        jid, rest = rest[: int(size)], rest[int(size) :]
        size, _, rest = rest.partition(b":")
        queue, raw = rest[: int(size)], rest[int(size) :]
        decoded = json.loads(raw)
        assert (decoded["jid"], decoded["queue"]) == (jid.decode(), queue.decode())
        found.append(decoded["jid"])
    return found
