"""AsyncTask's enqueuer: ``python -m bench.core.enqueue URL MODE N BATCH|RATE``, on any broker URL.

Run in its own process, like the Ruby side (``bench/runtime/ruby/enqueue.rb``) and the peers'
enqueuers, so that all start from a fresh interpreter. MODE "bulk" uses ``perform_bulk``
(one round trip per BATCH jobs), "single" calls ``perform_async`` N times, "task" creates one
tracked task of N items (``create_task(..., chunk_size=1)``: N jobs), "latency" sends N
latency jobs with ``perform_async(time.time())`` at RATE per second (see ``paced``),
"coroutines" calls ``aperform_async`` N times from ``COROUTINES`` coroutines on one event loop.
Prints one JSON line: ``{"jobs": N, "seconds": elapsed}``, with "coroutines" also
``"stall_ms"``: how late, at most, a 1 ms timer on that loop woke while they pushed (its wait is
rounded up to the next millisecond: a loop that never stalls shows up to 1). Only the enqueue
is timed, after one ping of the broker.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import asynctask
from bench.core.noop_jobs import latency_job, noop_job
from bench.core.tracked_jobs import tracked_noop_job
from bench.peers.pacing import paced

#: Coroutines pushing side by side in mode "coroutines", and the period of its timer.
COROUTINES = 1000
TICK = 0.001
WARM_UP_QUEUE = "warm-up"


def main(argv: list[str]) -> int:
    # The fourth argument is the batch size of "bulk", the rate (jobs/s) of "latency".
    url, mode, count, size = argv[0], argv[1], int(argv[2]), argv[3]
    client = asynctask.configure(asynctask.Settings(broker_url=url, tracking=mode == "task"))
    client.broker.ping()
    start = time.perf_counter()
    if mode == "bulk":
        noop_job.perform_bulk([[] for _ in range(count)], batch_size=int(size))
    elif mode == "single":
        for _ in range(count):
            noop_job.perform_async()
    elif mode == "latency":
        paced(count, float(size), lambda: latency_job.perform_async(time.time()))
    elif mode == "coroutines":
        stall_ms = asyncio.run(_from_coroutines(count))
    elif mode == "task":
        asynctask.Tracking(client).create_task(tracked_noop_job, range(count), chunk_size=1)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    seconds = time.perf_counter() - start
    report: dict[str, float] = {"jobs": count, "seconds": seconds}
    if mode == "coroutines":
        report["stall_ms"] = stall_ms
    print(json.dumps(report))
    return 0


async def _from_coroutines(count: int) -> float:
    """Push ``count`` jobs from ``COROUTINES`` coroutines; the loop's longest stall, in ms."""
    # Connected first, as a server's client is by its first request; to a queue of its own,
    # which the count of queued jobs leaves out.
    await noop_job.set(queue=WARM_UP_QUEUE).aperform_async()
    stopped = asyncio.Event()
    longest = 0.0

    async def tick() -> None:
        nonlocal longest
        while not stopped.is_set():
            asked = time.perf_counter()
            await asyncio.sleep(TICK)
            longest = max(longest, time.perf_counter() - asked - TICK)

    async def push(share: int) -> None:
        for _ in range(share):
            await noop_job.aperform_async()

    ticker = asyncio.create_task(tick())
    shares = [count // COROUTINES + (n < count % COROUTINES) for n in range(COROUTINES)]
    await asyncio.gather(*(push(share) for share in shares))
    stopped.set()
    await ticker
    return longest * 1000


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
