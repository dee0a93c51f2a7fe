"""Telling that Redis lost its data: a restart without persistence, a flush, a failover to an
empty replica. Everything the runtime keeps there is gone then: queued, scheduled, retrying,
in-flight, held and stopped jobs; workers and SQL cannot tell by themselves.

A token (``Keys.data_epoch``) is set once, when missing, and never removed. Each worker reads it
with every heartbeat: a worker that finds another token than the one it saw last knows that
Redis lost its data in between (``worker.lost``).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import redis

from asynctask.keys import Keys


@dataclass(frozen=True, slots=True)
class Epoch:
    #: The token Redis holds now.
    token: str
    #: This look set it: the token was missing.
    created: bool


def look(conn: redis.Redis, keys: Keys) -> Epoch:
    """The token, set now if missing: one round trip."""
    mine = secrets.token_hex(8)
    pipe = conn.pipeline(transaction=True)
    pipe.set(keys.data_epoch, mine, nx=True)
    pipe.get(keys.data_epoch)
    created, token = pipe.execute()
    return Epoch(token.decode(), bool(created))


def count_loss(conn: redis.Redis, keys: Keys) -> None:
    conn.incr(keys.data_losses)
