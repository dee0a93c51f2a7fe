"""Helpers for the read-model tests: hand-written Sidekiq payloads and process records."""

from __future__ import annotations

import json
from typing import Any

import redis

from asynctask import payload
from asynctask.keys import Keys


def sidekiq_job(**fields: Any) -> payload.JobDict:
    """A job as Sidekiq 6/7 writes it (key order included); ``fields`` override or add keys."""
    stamp = payload.now()
    job: payload.JobDict = {
        "retry": True,
        "queue": "default",
        "args": [1, "ünï"],
        "class": "HardJob",
        "jid": payload.new_jid(),
        "created_at": stamp,
        "enqueued_at": stamp,
    }
    job.update(fields)
    return job


def write_process(
    conn: redis.Redis,
    keys: Keys,
    identity: str,
    *,
    busy: int = 0,
    quiet: bool = False,
    info: dict[str, Any] | None = None,
    ttl: int = 60,
) -> None:
    """A process record as Sidekiq 6.4.1's heartbeat writes it."""
    hostname, pid, _ = identity.split(":")
    record = {
        "hostname": hostname,
        "started_at": payload.now() - 100,
        "pid": int(pid),
        "tag": "app",
        "concurrency": 10,
        "queues": ["critical", "default"],
        "labels": ["blue"],
        "identity": identity,
    }
    record.update(info or {})
    pipe = conn.pipeline(transaction=True)
    pipe.sadd(keys.processes, identity)
    pipe.hset(
        keys.process(identity),
        mapping={
            "info": json.dumps(record, separators=(",", ":")),
            "busy": busy,
            "beat": repr(payload.now()),
            "rtt_us": 551,
            "quiet": "true" if quiet else "false",
            "rss": 29676,
        },
    )
    pipe.expire(keys.process(identity), ttl)
    pipe.execute()
