"""Resumable jobs' checkpoints on Redis: a hash per job (``Keys.checkpoint``) holding the
cursor ``c``, the iterations ``n`` and the ``stop`` flag, expiring ``CHECKPOINT_TTL`` after
its last write so that the checkpoints of jobs deleted from a set do not stay for ever."""

from __future__ import annotations

from typing import cast

import redis

from asynctask import payload
from asynctask.brokers.checkpoints import CHECKPOINT_TTL, Checkpoint, Checkpoints
from asynctask.errors import PayloadError
from asynctask.keys import Keys


class RedisCheckpoints(Checkpoints):
    errors = (redis.RedisError, OSError)

    def __init__(self, connection: redis.Redis, keys: Keys) -> None:
        self.redis = connection
        self.keys = keys

    def load(self, jid: str) -> Checkpoint:
        cursor, iterations, stop = cast(
            list[bytes | None], self.redis.hmget(self.keys.checkpoint(jid), ["c", "n", "stop"])
        )
        return Checkpoint(
            cursor.decode() if cursor is not None else None,
            int(iterations) if iterations is not None else 0,
            stop is not None,
        )

    def save(self, jid: str, cursor: str, iterations: int) -> bool:
        key = self.keys.checkpoint(jid)
        pipe = self.redis.pipeline(transaction=True)
        pipe.hset(key, mapping={"c": cursor, "n": iterations})
        pipe.expire(key, CHECKPOINT_TTL)
        pipe.hexists(key, "stop")
        return bool(pipe.execute()[-1])

    def clear(self, jid: str) -> None:
        self.redis.delete(self.keys.checkpoint(jid))

    def request_stop(self, jid: str) -> bool:
        key = self.keys.checkpoint(jid)
        pipe = self.redis.pipeline(transaction=True)
        pipe.hsetnx(key, "stop", 1)
        pipe.expire(key, CHECKPOINT_TTL)
        return bool(pipe.execute()[0])

    def withdraw_stop(self, jid: str) -> None:
        # The hash disappears with its last field: a job that never stored a cursor leaves nothing.
        self.redis.hdel(self.keys.checkpoint(jid), "stop")

    def is_claimed(self, jid: str) -> bool:
        """One round trip for the registry of in-flight lists, one for all of them: a few jobs
        per worker process, whatever the length of the queues."""
        lists = [key.decode() for key in cast(list[bytes], self.redis.hkeys(self.keys.inflight_registry))]
        if not lists:
            return False
        pipe = self.redis.pipeline(transaction=False)
        for key in lists:
            pipe.lrange(key, 0, -1)
        needle = jid.encode()
        for held in pipe.execute():
            for raw in cast(list[bytes], held):
                if needle in raw and _jid_of(raw) == jid:
                    return True
        return False


def _jid_of(raw: bytes) -> str | None:
    try:
        return payload.valid_jid(payload.loads(raw).get("jid"))
    except PayloadError:
        return None
