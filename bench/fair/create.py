"""``python -m bench.fair.create``: create the tasks of one drain in a process of its own and
print, as JSON, how long it took and how many jobs the tasks hold.

``--tasks 1`` creates one task of N items without a tenant (a share of its own); more tasks
split the N items among them, each task of its own tenant (``t0``, ``t1``, ...), so that a fair
queue has that many shares to serve in turn. The tasks are created one after the other: in
push order, each task's jobs all come before the next task's.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator

from asynctask import Client, Settings, Tracking, default_registry
from asynctask.middleware import Chain, TrackingClientMiddleware
from bench.feeds.jobs import feed_noop


def _items(count: int) -> Iterator[int]:
    """A task's items as a stream: the creating process never holds them all."""
    yield from range(count)


def sizes(jobs: int, tasks: int) -> list[int]:
    """``jobs`` split among ``tasks`` as evenly as can be, the larger ones first."""
    each, extra = divmod(jobs, tasks)
    return [each + (1 if i < extra else 0) for i in range(tasks)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--broker", required=True)
    parser.add_argument("--database", required=True)
    parser.add_argument("--jobs", type=int, required=True)
    parser.add_argument("--tasks", type=int, default=1)
    args = parser.parse_args()
    settings = Settings(broker_url=args.broker, database_url=args.database)
    client = Client(settings, registry=default_registry, middleware=Chain([TrackingClientMiddleware()]))
    tracking = Tracking(client)
    total = 0
    try:
        started = time.perf_counter()
        for i, size in enumerate(sizes(args.jobs, args.tasks)):
            tenant = f"t{i}" if args.tasks > 1 else None
            total += tracking.create_task(feed_noop, _items(size), tenant=tenant).total
        seconds = time.perf_counter() - started
    finally:
        client.close()
        tracking.engine.dispose()
    print(json.dumps({"tasks": args.tasks, "seconds": seconds, "total": total}))


if __name__ == "__main__":
    main()
