"""AsyncTask's enqueuer of the sql section: ``python -m bench.sql_enqueue URL N BATCH MODE``.

MODE "bulk": ``perform_bulk`` of N no-op jobs onto the SQL broker at URL, BATCH jobs per
broker push. MODE "task": one tracked task of N items, ``create_task(..., chunk_size=1)``
(N jobs). Runs in a fresh process like the peers' enqueuers and prints
``{"jobs": N, "seconds": elapsed}``, only the enqueue timed (the broker is opened first).
"""

from __future__ import annotations

import json
import sys
import time

import asynctask
from bench.noop_jobs import noop_job
from bench.tracked_jobs import tracked_noop_job


def main(argv: list[str]) -> int:
    url, count, batch, mode = argv[0], int(argv[1]), int(argv[2]), argv[3]
    client = asynctask.configure(asynctask.Settings(broker_url=url, tracking=mode == "task"))
    client.broker.ping()
    start = time.perf_counter()
    if mode == "bulk":
        noop_job.perform_bulk([[] for _ in range(count)], batch_size=batch)
    elif mode == "task":
        asynctask.Tracking(client).create_task(tracked_noop_job, range(count), chunk_size=1)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    seconds = time.perf_counter() - start
    print(json.dumps({"jobs": count, "seconds": seconds}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
