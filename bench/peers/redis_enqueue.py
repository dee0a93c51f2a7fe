"""``python bench/peers/redis_enqueue.py PEER URL MODE N BATCH|RATE``: a Python peer's enqueuer on Redis.

PEER is celery, rq, dramatiq, huey (from the peers' venv) or arq (from arq's venv); the app
modules beside this file are importable (``PYTHONPATH``). MODE "bulk" enqueues N no-op jobs
with the peer's own bulk call, BATCH jobs per call: RQ's ``Queue.enqueue_many`` in one
pipeline per batch; arq, which has none, ``asyncio.gather`` of BATCH ``enqueue_job`` calls
(its idiom for many enqueues; each call on a pooled connection of its own); Celery, Dramatiq
and Huey have none (their groups publish one message per job), so one call per job, as in
"single". "single" makes one call per job. "latency" sends N latency jobs at RATE per second,
each carrying ``time.time()`` taken just before its call, paced by ``pacing.paced``
(shared with AsyncTask's enqueuer): the i-th at start + i/RATE, a late one at once, none early.

Prints one JSON line, ``{"jobs": N, "seconds": elapsed}``; only the enqueue is timed, after one
ping on the connection the enqueue then uses.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from pacing import paced  # type: ignore[import-not-found]  # beside this file, on PYTHONPATH

#: Sends one job; the latency job's argument is its enqueue time.
Send = Callable[[], object]
SendAt = Callable[[float], object]


def timed(
    mode: str, count: int, size: str, noop: Send, latency: SendAt, bulk: Callable[[int, int], None] | None
) -> float:
    """Seconds to enqueue ``count`` jobs of ``mode`` with these calls."""
    start = time.perf_counter()
    if mode == "bulk" and bulk is not None:
        bulk(count, int(size))
    elif mode in ("bulk", "single"):
        for _ in range(count):
            noop()
    elif mode == "latency":
        paced(count, float(size), lambda: latency(time.time()))
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    return time.perf_counter() - start


def celery(mode: str, count: int, size: str) -> float:
    from celery_app import app, latency, noop  # type: ignore[import-not-found]  # peers' venv

    # The producer pool's connection, which every delay() below takes back from the pool.
    with app.producer_or_acquire() as producer:
        producer.connection.default_channel.client.ping()
    return timed(mode, count, size, noop.delay, latency.delay, None)


def rq(mode: str, count: int, size: str) -> float:
    import rq_jobs  # type: ignore[import-not-found]  # peers' venv
    from redis import Redis
    from rq import Queue  # type: ignore[import-not-found]

    conn = Redis.from_url(os.environ["BENCH_REDIS_URL"])
    conn.ping()
    queue = Queue("default", connection=conn)

    def bulk(count: int, batch: int) -> None:
        for first in range(0, count, batch):
            jobs = [Queue.prepare_data(rq_jobs.noop) for _ in range(min(batch, count - first))]
            with conn.pipeline() as pipe:
                queue.enqueue_many(jobs, pipeline=pipe)
                pipe.execute()

    return timed(
        mode,
        count,
        size,
        lambda: queue.enqueue(rq_jobs.noop),
        lambda t: queue.enqueue(rq_jobs.latency, t),
        bulk,
    )


def dramatiq(mode: str, count: int, size: str) -> float:
    from dramatiq_app import broker, latency, noop  # type: ignore[import-not-found]  # peers' venv

    broker.client.ping()
    return timed(mode, count, size, noop.send, latency.send, None)


def huey(mode: str, count: int, size: str) -> float:
    from huey_redis_app import huey, latency, noop  # type: ignore[import-not-found]  # peers' venv

    huey.storage.conn.ping()
    return timed(mode, count, size, noop, latency, None)


def arq(mode: str, count: int, size: str) -> float:
    return asyncio.run(_arq(mode, count, size))


async def _arq(mode: str, count: int, size: str) -> float:
    from arq import create_pool  # type: ignore[import-not-found]  # arq's venv
    from arq.connections import RedisSettings  # type: ignore[import-not-found]

    pool: Any = await create_pool(RedisSettings.from_dsn(os.environ["BENCH_REDIS_URL"]))
    try:
        await pool.ping()
        start = time.perf_counter()
        if mode == "bulk":
            batch = int(size)
            for first in range(0, count, batch):
                await asyncio.gather(*(pool.enqueue_job("noop") for _ in range(min(batch, count - first))))
        elif mode == "single":
            for _ in range(count):
                await pool.enqueue_job("noop")
        elif mode == "latency":
            await _apaced(count, float(size), lambda: pool.enqueue_job("latency", time.time()))
        else:
            raise SystemExit(f"unknown mode {mode!r}")
        return time.perf_counter() - start
    finally:
        await pool.aclose()


async def _apaced(count: int, rate: float, send: Callable[[], Awaitable[object]]) -> None:
    """``paced`` on an event loop."""
    start = time.perf_counter()
    for i in range(count):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        await send()


PEERS: dict[str, Callable[[str, int, str], float]] = {
    "celery": celery,
    "rq": rq,
    "dramatiq": dramatiq,
    "huey": huey,
    "arq": arq,
}


def main(argv: list[str]) -> int:
    # The fifth argument is the batch size of "bulk", the rate (jobs/s) of "latency".
    peer, url, mode, count, size = argv[0], argv[1], argv[2], int(argv[3]), argv[4]
    # The app modules read it when imported.
    os.environ["BENCH_REDIS_URL"] = url
    seconds = PEERS[peer](mode, count, size)
    print(json.dumps({"jobs": count, "seconds": seconds}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
