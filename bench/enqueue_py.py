"""Python side of the enqueue measurement: ``python -m bench.enqueue_py URL MODE N BATCH``.

Run in its own process, like the Ruby side (``bench/ruby/enqueue.rb``), so that both start
from a fresh interpreter. MODE "bulk" uses ``perform_bulk`` (one pipelined round trip per
BATCH jobs), "single" calls ``perform_async`` N times. Prints one JSON line:
``{"jobs": N, "seconds": elapsed}``; only the pushes are timed, after one PING.
"""

from __future__ import annotations

import json
import sys
import time

import asynctask
from bench.noop_jobs import noop_job


def main(argv: list[str]) -> int:
    url, mode, count, batch = argv[0], argv[1], int(argv[2]), int(argv[3])
    client = asynctask.configure(asynctask.Settings(redis_url=url))
    client.redis.ping()
    start = time.perf_counter()
    if mode == "bulk":
        noop_job.perform_bulk([[] for _ in range(count)], batch_size=batch)
    elif mode == "single":
        for _ in range(count):
            noop_job.perform_async()
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    seconds = time.perf_counter() - start
    print(json.dumps({"jobs": count, "seconds": seconds}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
