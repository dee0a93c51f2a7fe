"""AsyncTask's enqueuer: ``python -m bench.enqueue_py URL MODE N BATCH``, on any broker URL.

Run in its own process, like the Ruby side (``bench/ruby/enqueue.rb``) and the peers'
enqueuers, so that all start from a fresh interpreter. MODE "bulk" uses ``perform_bulk``
(one round trip per BATCH jobs), "single" calls ``perform_async`` N times, "task" creates one
tracked task of N items (``create_task(..., chunk_size=1)``: N jobs). Prints one JSON line:
``{"jobs": N, "seconds": elapsed}``; only the enqueue is timed, after one ping of the broker.
"""

from __future__ import annotations

import json
import sys
import time

import asynctask
from bench.noop_jobs import noop_job
from bench.tracked_jobs import tracked_noop_job


def main(argv: list[str]) -> int:
    url, mode, count, batch = argv[0], argv[1], int(argv[2]), int(argv[3])
    client = asynctask.configure(asynctask.Settings(broker_url=url, tracking=mode == "task"))
    client.broker.ping()
    start = time.perf_counter()
    if mode == "bulk":
        noop_job.perform_bulk([[] for _ in range(count)], batch_size=batch)
    elif mode == "single":
        for _ in range(count):
            noop_job.perform_async()
    elif mode == "task":
        asynctask.Tracking(client).create_task(tracked_noop_job, range(count), chunk_size=1)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    seconds = time.perf_counter() - start
    print(json.dumps({"jobs": count, "seconds": seconds}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
