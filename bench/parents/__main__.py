"""``python -m bench.parents``: what waiting for a task costs, on Redis (PostgreSQL tracking) and
on the PostgreSQL broker.

Per broker and repetition, in a private database (and a private Redis): N tasks of one job are
created plain, then N more ``after`` one parent task (``run_if="complete"``); then the parent
ends, cancelled with nothing running (the same settling and release a worker's or flusher's end
of its last job runs), and the bench times that call: on Redis it returns once every child's
feed is resumed, on the PostgreSQL broker once the transaction that resumes them all has
committed (any worker's next feed tick then releases them). Reported: creation per task, plain
and waiting; the parent's end with N children waiting, whole and per child; and how many children
it released (all of them, or the bench is wrong). No worker runs: the jobs stay queued.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from sqlalchemy import func, select

from asynctask import Client, Registry, Settings, Tracking, job
from asynctask.db.migrate import upgrade
from asynctask.middleware import Chain
from asynctask.tracking import parents
from asynctask.tracking.models import Task
from bench.core.fmt import fixed, spread, table
from bench.core.postgres import add_pg_url, require_postgres
from bench.core.redis_server import RedisServer
from bench.tracking.db import PostgresDatabase

BROKERS = ("redis", "postgresql")


class Run(NamedTuple):
    plain_ms: float
    waiting_ms: float
    end_s: float
    released: int


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.parents", description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--children", type=int, default=10_000, help="tasks waiting for the one parent")
    add_pg_url(parser)
    args = parser.parse_args(argv)
    # No worker runs: every creation would warn that none listens to the queue.
    logging.getLogger("asynctask").setLevel(logging.ERROR)
    require_postgres(args.pg_url)
    runs: dict[str, list[Run]] = {broker: [] for broker in BROKERS}
    with tempfile.TemporaryDirectory(prefix="bench-parents-") as tmp, RedisServer(Path(tmp)) as server:
        for rep in range(args.reps):
            for broker in BROKERS if rep % 2 == 0 else reversed(BROKERS):
                with PostgresDatabase(args.pg_url) as database:
                    upgrade(database.url)
                    settings = (
                        Settings(
                            redis_url=server.url, database_url=database.url, namespace=f"bench-parents-{rep}"
                        )
                        if broker == "redis"
                        else Settings(broker_url=database.url, database_url=database.url)
                    )
                    done = _run(settings, args.children)
                runs[broker].append(done)
                print(
                    f"rep {rep + 1}/{args.reps} {broker}: created {done.plain_ms:.2f} ms plain, "
                    f"{done.waiting_ms:.2f} ms waiting; the parent's end with {args.children:,} children "
                    f"waiting took {done.end_s:.2f} s",
                    flush=True,
                )
    print("\n".join(_report(runs, args.children)))


def _run(settings: Settings, children: int) -> Run:
    registry = Registry()

    @job(registry=registry, name="bench_step")
    def bench_step(chunk: list[int]) -> None: ...

    client = Client(settings, registry=registry, middleware=Chain())
    tracking = Tracking(client)
    try:
        started = time.perf_counter()
        for n in range(children):
            tracking.create_task("bench_step", [n])
        plain = time.perf_counter() - started
        parent = tracking.create_task("bench_step", [0]).id
        started = time.perf_counter()
        for n in range(children):
            tracking.create_task("bench_step", [n], after=[parent], run_if="complete")
        waiting = time.perf_counter() - started
        started = time.perf_counter()
        tracking.cancel_task(parent)
        ended = time.perf_counter() - started
        with tracking.engine.connect() as connection:
            released = connection.execute(
                select(func.count()).select_from(Task).where(Task.hold == parents.RELEASED)
            ).scalar_one()
        return Run(plain / children * 1000, waiting / children * 1000, ended, int(released))
    finally:
        client.close()
        tracking.engine.dispose()


def _report(runs: dict[str, list[Run]], children: int) -> list[str]:
    rows = []
    for broker, found in runs.items():
        rows.append(
            [
                broker,
                spread([r.plain_ms for r in found], fixed(2)),
                spread([r.waiting_ms for r in found], fixed(2)),
                spread([r.end_s for r in found], fixed(2)),
                spread([r.end_s / children * 1e6 for r in found], fixed(0)),
                f"{min(r.released for r in found):,}",
            ]
        )
    return [
        "",
        *table(
            [
                "broker",
                "create, plain (ms/task)",
                "create, waiting (ms/task)",
                f"parent's end, {children:,} waiting (s)",
                "per child (µs)",
                "children released (fewest)",
            ],
            rows,
        ),
    ]


if __name__ == "__main__":
    main()
