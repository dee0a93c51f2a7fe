"""``python -m bench.feeds.create``: create one task of N items in a process of its own and
print, as JSON, how long it took and the process's peak RSS: a task's memory must not grow
with its size, so the peak of a 1,000,000-item task is compared with a small one's."""

from __future__ import annotations

import argparse
import json
import resource
import time
from collections.abc import Iterator

from asynctask import Client, Settings, Tracking, default_registry
from asynctask.middleware import Chain, TrackingClientMiddleware
from bench.feeds.jobs import feed_noop


def _items(count: int) -> Iterator[int]:
    """The items as a stream: the task never holds them all."""
    yield from range(count)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--broker", required=True)
    parser.add_argument("--database", required=True)
    parser.add_argument("--items", type=int, required=True)
    parser.add_argument("--parallel", type=int)
    args = parser.parse_args()
    settings = Settings(broker_url=args.broker, database_url=args.database)
    client = Client(settings, registry=default_registry, middleware=Chain([TrackingClientMiddleware()]))
    tracking = Tracking(client)
    try:
        started = time.perf_counter()
        task = tracking.create_task(feed_noop, _items(args.items), parallel=args.parallel)
        seconds = time.perf_counter() - started
    finally:
        client.close()
        tracking.engine.dispose()
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"task": task.id, "seconds": seconds, "peak_rss_kb": peak_kb, "total": task.total}))


if __name__ == "__main__":
    main()
