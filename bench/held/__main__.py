"""``python -m bench.held``: whether tasks that wait for another cost the claims of other jobs.

Per broker (Redis, its tracking in PostgreSQL; the PostgreSQL broker) two stores side by side,
alike but for N tasks of one job each, in the drained queue, held waiting for a parent that
never ends (its one job waits in a queue no worker serves), in one of them. Each repetition
drains J no-op jobs (untracked: claims and acknowledgements alone) with one worker process of C
threads from each store, in an order reversed every other repetition, timed from outside by
the jobs' marker file (first job done -> last). Reported: jobs per second without and with the
held tasks, and the ratio per repetition. Creating the held tasks takes a couple of minutes per
broker; each drain a few seconds.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from asynctask import Client, Registry, Settings, Tracking, job
from asynctask.db.migrate import upgrade
from asynctask.middleware import Chain
from bench.core.drain import POSTGRESQL, QUEUE, REDIS, BenchBroker, DrainRun, drain_once
from bench.core.fmt import rate, ratio, spread, table
from bench.core.noop_jobs import noop_job
from bench.core.postgres import add_pg_url, require_postgres
from bench.core.redis_server import RedisServer
from bench.sql.db import PostgresDatabase

JOBS_MODULE = "bench/core/noop_jobs.py"
#: The queue of the parent's job, which no worker serves: the parent never ends.
PARKED = "parked"
WITHOUT, WITH = "without held tasks", "with held tasks"


@dataclass
class HeldRun(DrainRun):
    case: str
    backend: str
    jobs: int
    concurrency: int
    processes: int = 1

    @property
    def rate(self) -> float:
        return self.jobs / self.steady_s if self.steady_s else 0.0


@dataclass
class Store:
    """One side of a broker's comparison: where the worker claims, and what the jobs and the
    held tasks are written with."""

    broker: BenchBroker
    settings: Settings


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.held", description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--held", type=int, default=10_000, help="tasks held waiting for the parent")
    parser.add_argument("--jobs", type=int, default=20_000, help="no-op jobs drained per run")
    parser.add_argument("--concurrency", type=int, default=10)
    add_pg_url(parser)
    args = parser.parse_args(argv)
    # No worker serves the parked queue: every creation would warn so.
    logging.getLogger("asynctask").setLevel(logging.ERROR)
    require_postgres(args.pg_url)
    runs: list[HeldRun] = []
    with tempfile.TemporaryDirectory(prefix="bench-held-") as tmp, ExitStack() as stack:
        workdir = Path(tmp)
        for backend in (REDIS, POSTGRESQL):
            stores = {case: _store(stack, backend, case, workdir, args.pg_url) for case in (WITHOUT, WITH)}
            print(f"{backend}: holding {args.held:,} tasks ...", flush=True)
            _hold(stores[WITH].settings, args.held)
            for rep in range(args.reps):
                for case in (WITHOUT, WITH) if rep % 2 == 0 else (WITH, WITHOUT):
                    one = HeldRun(case=case, backend=backend, jobs=args.jobs, concurrency=args.concurrency)
                    store = stores[case]
                    label = f"{backend}-{'with' if case == WITH else 'without'}-{rep}"
                    drain_once(one, store.broker, JOBS_MODULE, label, workdir, _pusher(store, args.jobs))
                    if one.error:
                        raise SystemExit(f"{label}: {one.error}")
                    runs.append(one)
                    print(f"rep {rep + 1}/{args.reps} {backend} {case}: {one.rate:,.0f} jobs/s", flush=True)
    print("\n".join(_report(runs, args.held)))


def _store(stack: ExitStack, backend: str, case: str, workdir: Path, pg_url: str) -> Store:
    """A private store: a Redis server of its own with a PostgreSQL database for its tracking,
    or a PostgreSQL database as the broker; migrated, dropped when ``stack`` closes."""
    label = "with" if case == WITH else "without"
    database = stack.enter_context(PostgresDatabase(pg_url, f"held_{backend}_{label}"))
    upgrade(database.url)
    if backend == POSTGRESQL:
        return Store(
            BenchBroker(POSTGRESQL, database.url, postgres=database), Settings(broker_url=database.url)
        )
    folder = workdir / f"redis-{label}"
    folder.mkdir()
    server = stack.enter_context(RedisServer(folder))
    return Store(
        BenchBroker(REDIS, server.url, redis_server=server),
        Settings(redis_url=server.url, database_url=database.url),
    )


def _hold(settings: Settings, count: int) -> None:
    """``count`` one-job tasks in the drained queue, each waiting for one parent that never ends."""
    registry = Registry()

    @job(registry=registry, name="bench_parked")
    def bench_parked(chunk: list[int]) -> None: ...

    @job(registry=registry, name="bench_held", queue=QUEUE)
    def bench_held(chunk: list[int]) -> None: ...

    client = Client(settings, registry=registry, middleware=Chain())
    tracking = Tracking(client)
    try:
        parent = tracking.create_task("bench_parked", [0], queue=PARKED).id
        for n in range(count):
            tracking.create_task("bench_held", [n], after=[parent])
    finally:
        client.close()
        tracking.engine.dispose()


def _pusher(store: Store, jobs: int) -> Callable[[], None]:
    """What puts a drain's jobs in ``store``."""

    def push() -> None:
        client = Client(store.settings, middleware=Chain())
        try:
            noop_job.set(client=client).perform_bulk([[] for _ in range(jobs)], batch_size=1000)
        finally:
            client.close()

    return push


def _report(runs: list[HeldRun], held: int) -> list[str]:
    rows = []
    for backend in (REDIS, POSTGRESQL):
        without = [r for r in runs if r.backend == backend and r.case == WITHOUT]
        with_held = [r for r in runs if r.backend == backend and r.case == WITH]
        ratios = [w.rate / o.rate for o, w in zip(without, with_held, strict=True)]
        rows.append(
            [
                backend,
                spread([r.rate for r in without], rate),
                spread([r.rate for r in with_held], rate),
                f"{ratio(statistics.median(ratios))} ({', '.join(ratio(r) for r in ratios)})",
            ]
        )
    return [
        "",
        *table(
            ["broker", "jobs/s, nothing held", f"jobs/s, {held:,} tasks held", "held ÷ nothing held"],
            rows,
        ),
    ]


if __name__ == "__main__":
    main()
