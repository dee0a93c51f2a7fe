"""AsyncTask's enqueuer: ``python -m bench.core.enqueue URL MODE N BATCH|RATE``, on any broker URL.

Run in its own process, like the Ruby side (``bench/runtime/ruby/enqueue.rb``) and the peers'
enqueuers, so that all start from a fresh interpreter. MODE "bulk" uses ``perform_bulk``
(one round trip per BATCH jobs), "single" calls ``perform_async`` N times, "task" creates one
tracked task of N items (``create_task(..., chunk_size=1)``: N jobs), "latency" sends N
latency jobs with ``perform_async(time.time())`` at RATE per second (see ``paced``). Prints one
JSON line: ``{"jobs": N, "seconds": elapsed}``; only the enqueue is timed, after one ping of
the broker.
"""

from __future__ import annotations

import json
import sys
import time

import asynctask
from bench.core.noop_jobs import latency_job, noop_job
from bench.core.tracked_jobs import tracked_noop_job
from bench.peers.pacing import paced


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
    elif mode == "task":
        asynctask.Tracking(client).create_task(tracked_noop_job, range(count), chunk_size=1)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    seconds = time.perf_counter() - start
    print(json.dumps({"jobs": count, "seconds": seconds}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
