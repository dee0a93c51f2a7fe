"""One tree's side of ``python -m bench.work``: every scenario drained once by one worker process,
with the totals of what it cost written as JSON.

Run as ``python -m bench.work.scenarios`` with the tree's ``asynctask`` first on ``PYTHONPATH``;
it uses only the public API and the command line, so that any commit can be measured with it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import psycopg
import redis

from bench.core.timing import drain_timeout, poll_marker

COUNTING = Path(__file__).resolve().parent / "counting"
#: Seconds between two reads of the tasks' status once every job ran (each read is a query).
TASK_POLL = 0.05
#: PostgreSQL's statistics reach pg_stat_database up to a second after a transaction.
STATS_DELAY = 1.5
#: pg_stat_database's counters of the work done, not of how it was planned (a sequential scan
#: of a small table counts its rows in tup_returned, and the planner's choice varies).
SQL_COUNTERS = ("tup_fetched", "tup_inserted", "tup_updated", "tup_deleted", "xact_commit")
#: Tenants of the fair and FIFO scenarios (one task each).
TENANTS = 10
#: The queue the FIFO scenario's worker reads in push order rather than in turn by tenant.
FIFO_QUEUE = "fifo"
#: The bench's no-op jobs the scenarios push: a plain and a keyed one with the same argument,
#: and the chunk-taking one of tasks. Each appends one byte to ``BENCH_MARKER``.
JOB_MODULES = ("bench.flow.jobs", "bench.core.tracked_jobs")

Totals = dict[str, float]


class Scenario(NamedTuple):
    #: Pushes the scenario's jobs; returns the ids of the tasks to wait for.
    push: Callable[[], list[str]]
    #: The worker's ``-q``.
    queue: str
    jobs: int


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.work.scenarios")
    parser.add_argument("--backend", choices=("redis", "postgresql"), required=True)
    parser.add_argument("--redis-url", help="the broker (redis backend)")
    parser.add_argument("--database-url", required=True, help="the tracking database (and postgresql broker)")
    parser.add_argument("--jobs", type=int, required=True)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    os.environ["ASYNCTASK_DATABASE_URL"] = args.database_url
    if args.redis_url:
        os.environ["ASYNCTASK_REDIS_URL"] = args.redis_url
    subprocess.run([sys.executable, "-m", "asynctask", "db", "upgrade"], check=True, capture_output=True)
    # No worker listens while a scenario pushes, by design: not a thing to warn about.
    logging.getLogger("asynctask").setLevel(logging.ERROR)
    drains = Drains(args)
    args.out.write_text(json.dumps(drains.run_all(), indent=1), encoding="utf-8")


class Drains:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.marker = args.workdir / "marker"
        self.redis = redis.Redis.from_url(args.redis_url) if args.redis_url else None

    def run_all(self) -> dict[str, Totals]:
        # Imported here: the environment above says where they push.
        import asynctask
        from bench.core.tracked_jobs import tracked_noop_job
        from bench.flow.jobs import flow_keyed, flow_plain

        n = self.args.jobs
        per_tenant = n // TENANTS

        def task(parallel: int | None = None) -> Callable[[], list[str]]:
            return lambda: [asynctask.create_task(tracked_noop_job, range(n), parallel=parallel).id]

        def tenants(queue: str) -> Callable[[], list[str]]:
            return lambda: [
                asynctask.create_task(tracked_noop_job, range(per_tenant), tenant=f"t{t}", queue=queue).id
                for t in range(TENANTS)
            ]

        def bulk(push: Callable[[], object]) -> Callable[[], list[str]]:
            def run() -> list[str]:
                push()
                return []  # no task to wait for: the marker counts the jobs

            return run

        plain = bulk(lambda: flow_plain.perform_bulk([[f"k{i % 50}"] for i in range(n)]))
        keyed = bulk(lambda: flow_keyed.perform_bulk([[f"k{i % 50}"] for i in range(n)]))
        scenarios = {
            "plain": Scenario(plain, "default", n),
            "keyed (50 keys)": Scenario(keyed, "default", n),
            "task": Scenario(task(), "default", n),
            "fed task (parallel 5)": Scenario(task(parallel=5), "default", n),
            f"fair ({TENANTS} tenants)": Scenario(tenants("default"), "default", TENANTS * per_tenant),
            f"fifo ({TENANTS} tenants)": Scenario(
                tenants(FIFO_QUEUE), f"{FIFO_QUEUE},1,fifo", TENANTS * per_tenant
            ),
        }
        return {
            name: self.drain(name, scenario, index, asynctask.get_task)
            for index, (name, scenario) in enumerate(scenarios.items())
        }

    def drain(self, name: str, scenario: Scenario, index: int, get_task: Callable[[str], Any]) -> Totals:
        self.marker.write_bytes(b"")
        calls = self.args.workdir / f"calls-{index}"
        before = self.counters()
        task_ids = scenario.push()
        env = os.environ | {
            "BENCH_MARKER": str(self.marker),
            "BENCH_CALLS": str(calls),
            "PYTHONPATH": os.pathsep.join([str(COUNTING), os.environ.get("PYTHONPATH", "")]),
        }
        argv = [sys.executable, "-m", "asynctask", "worker", "-q", scenario.queue]
        argv += [arg for module in JOB_MODULES for arg in ("-r", module)]
        argv += ["-c", str(self.args.concurrency), "--no-cpu-pinning"]
        with open(self.args.workdir / "worker.log", "ab") as log:
            worker = subprocess.Popen(argv, env=env, stdout=log, stderr=log)
        try:
            deadline = time.monotonic() + drain_timeout(scenario.jobs)

            def given_up() -> bool:
                return time.monotonic() > deadline or worker.poll() is not None

            # The marker first: reading a task asks the broker how many jobs are ahead of it, and
            # those commands, as many as the drain is long, would be counted with the jobs'.
            for read in poll_marker(self.marker, scenario.jobs):
                if not read.last and given_up():
                    raise SystemExit(f"{name}: {read.done} of {scenario.jobs} jobs ran")
            while not all(get_task(task_id).status == "finished" for task_id in task_ids):
                if given_up():
                    raise SystemExit(f"{name}: every job ran, but a task did not end")
                time.sleep(TASK_POLL)
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(60)
        after = self.counters()
        totals = {key: after[key] - before.get(key, 0.0) for key in after}
        totals["python calls"] = float(
            sum(int(path.read_text()) for path in calls.parent.glob(f"{calls.name}-*"))
        )
        return totals

    def counters(self) -> Totals:
        if self.redis is not None:
            stats = self.redis.info("commandstats")
            calls = {name.removeprefix("cmdstat_"): float(value["calls"]) for name, value in stats.items()}
            calls.pop("info", None)
            return {"redis commands": sum(calls.values())}
        time.sleep(STATS_DELAY)
        url = self.args.database_url
        database = url.rsplit("/", 1)[1]
        with psycopg.connect(url, autocommit=True) as connection:
            row = connection.execute(
                f"SELECT {', '.join(SQL_COUNTERS)} FROM pg_stat_database WHERE datname = %s", (database,)
            ).fetchone()
        assert row is not None
        return {f"sql {name}": float(value) for name, value in zip(SQL_COUNTERS, row, strict=True)}


if __name__ == "__main__":
    main()
