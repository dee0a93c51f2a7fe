"""A worker's heartbeat in Redis, as Sidekiq 6.x writes it (its API and Web UI read it).

1. PING, to measure ``rtt_us``;
2. one MULTI: note whether the ``<identity>`` hash still existed (it expires when the
   process could not beat for ``process_ttl``: others may have taken back its jobs), flush
   ``stat:processed``/``stat:failed`` (lifetime and daily, 5-year TTL),
   rewrite the busy-thread hash under both ``<identity>:workers`` (Sidekiq <= 6.4.1) and
   ``<identity>:work`` (>= 6.4.2), ``SADD processes``, the ``<identity>`` hash (info, busy,
   beat, quiet, rss, rtt_us) with its TTL, and ``RPOP <identity>-signals`` (TSTP, TERM, TTIN
   sent from outside). One transaction: a failed beat counted nothing, so its counts can be
   sent again with the next one.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, cast

import redis
from redis.client import Pipeline

from asynctask.brokers.base import Beat, BeatReply
from asynctask.keys import Keys

#: Daily stat keys live five years, as in Sidekiq.
STATS_TTL = 5 * 365 * 24 * 3600


def write_beat(conn: redis.Redis, keys: Keys, beat: Beat, ttl: int) -> BeatReply:
    """Write one heartbeat; return the signal popped for this process, if any."""
    start = time.perf_counter()
    conn.ping()
    rtt_us = int((time.perf_counter() - start) * 1_000_000)
    pipe = conn.pipeline(transaction=True)
    pipe.exists(keys.process(beat.identity))
    stats_and_work(pipe, keys, beat.identity, beat.processed, beat.failed, beat.work, ttl)
    pipe.sadd(keys.processes, beat.identity)
    pipe.hset(
        keys.process(beat.identity),
        mapping={
            "info": beat.info,
            "busy": beat.busy,
            "beat": repr(time.time()),
            "rtt_us": rtt_us,
            "quiet": "true" if beat.quiet else "false",
            "rss": beat.rss_kb,
            "loop_lag_us": beat.loop_lag_us,
        },
    )
    pipe.expire(keys.process(beat.identity), ttl)
    pipe.rpop(keys.signals(beat.identity))
    replies = pipe.execute()
    signal = replies[-1]
    return BeatReply(signal.decode() if signal else None, was_live=bool(replies[0]))


def clear(conn: redis.Redis, keys: Keys, identity: str, processed: int, failed: int, ttl: int) -> None:
    """Flush the last counts and leave the process set, as Sidekiq does on shutdown."""
    pipe = conn.pipeline(transaction=True)
    stats_and_work(pipe, keys, identity, processed, failed, {}, ttl)
    pipe.srem(keys.processes, identity)
    pipe.execute()


def stats_and_work(
    pipe: Pipeline, keys: Keys, identity: str, processed: int, failed: int, work: dict[str, str], ttl: int
) -> None:
    """Queue the counts' increments and the busy-thread hashes' rewrite on ``pipe``."""
    for total, daily, count in (
        (keys.stat_processed, keys.stat_processed_day(), processed),
        (keys.stat_failed, keys.stat_failed_day(), failed),
    ):
        if count:
            pipe.incrby(total, count)
            pipe.incrby(daily, count)
            pipe.expire(daily, STATS_TTL)
    for work_key in (keys.workers(identity), keys.work(identity)):
        pipe.unlink(work_key)
        if work:
            pipe.hset(work_key, mapping=cast("Mapping[Any, Any]", work))
            pipe.expire(work_key, ttl)
