"""The SQL broker's claim next to waiting keyed jobs: its PostgreSQL plans and timings with
1,000 and with 100,000 jobs waiting in the lines of 1,000 concurrency keys.

``python -m bench.sql.flow_plans [--pg-url URL] [--out FILE]`` creates a private database
(dropped at the end), fills it through the broker itself, and writes the plans (EXPLAIN
ANALYZE, BUFFERS) of the claim, of a promotion and of a keyed push's slot count, with the
median time of each over repetitions, to ``bench/results/flow_claim_plans.txt``. Every
measured statement runs in a transaction rolled back afterwards, so each sees the same rows.

What it shows: waiting keyed jobs are outside the fetch index (state ``lane``), so the claim's
plan and cost are the same whatever their number; a promotion reads one key's line by index.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, TextClause, text

from asynctask import payload
from asynctask.brokers.sql import SqlBroker
from asynctask.brokers.sql.flow import digest
from asynctask.db.migrate import upgrade
from asynctask.settings import Settings
from bench.sql.db import PostgresDatabase

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "bench" / "results" / "flow_claim_plans.txt"
KEYS = 1000
UNKEYED = 1000
REPEATS = 200
PUSH_BATCH = 1000


def fill(broker: SqlBroker, waiting_per_key: int) -> None:
    """Per key: one job holding its slot (claimable) and ``waiting_per_key`` in its line; plus
    ``UNKEYED`` unkeyed jobs. Pushed through the broker, batch by batch."""
    batch: list[tuple[payload.JobDict, float | None]] = []
    jobs: list[payload.JobDict] = [
        {"class": "Work", "args": [n], "queue": "default", "jid": payload.new_jid()} for n in range(UNKEYED)
    ]
    for per in range(waiting_per_key + 1):
        jobs += [
            {
                "class": "Keyed",
                "args": [k, per],
                "queue": "default",
                "jid": payload.new_jid(),
                "concurrency_key": f"key:{k}",
                "concurrency_limit": 1,
            }
            for k in range(KEYS)
        ]
    for job in jobs:
        batch.append((job, None))
        if len(batch) == PUSH_BATCH:
            broker.push(batch)
            batch = []
    if batch:
        broker.push(batch)


def measured(
    connection: Connection, statement: TextClause, params: dict[str, Any], setup: TextClause | None
) -> tuple[str, float]:
    """The statement's plan (one run), and its median time over ``REPEATS`` runs, each after
    ``setup`` in a transaction rolled back."""
    explain = text(f"EXPLAIN (ANALYZE, BUFFERS, COSTS) {statement.text}")
    with connection.begin() as tx:
        if setup is not None:
            connection.execute(setup, params)
        plan = "\n".join(row[0] for row in connection.execute(explain, params))
        tx.rollback()
    times = []
    for _ in range(REPEATS):
        with connection.begin() as tx:
            if setup is not None:
                connection.execute(setup, params)
            start = time.perf_counter()
            connection.execute(statement, params)
            times.append(time.perf_counter() - start)
            tx.rollback()
    return plan, statistics.median(times) * 1000


def scenario(url: str, waiting_per_key: int) -> list[str]:
    upgrade(url)
    broker = SqlBroker(Settings(broker_url=url))
    try:
        fill(broker, waiting_per_key)
        sql = broker.store.sql
        with broker.engine.connect() as connection:
            connection.execute(text("ANALYZE asynctask_job"))
            connection.commit()
            counts: dict[str, int] = dict(
                connection.execute(text("SELECT state, count(*) FROM asynctask_job GROUP BY state")).all()
            )
            connection.commit()
            report = [
                f"## {waiting_per_key * KEYS:,} keyed jobs waiting in the lines of {KEYS:,} keys",
                f"rows by state: {counts}",
                "",
            ]
            claim = sql.claim((False,), 10)
            params = {"ids": [], "me": "bench", "now": payload.now(), "wanted": 10, "queues": ["default"]}
            key = {"digest": digest("key:7"), "digests": [digest("key:7")], "now": 0.0}
            # The key's holder ends first, so that the promotion has a slot to fill.
            ended = text("DELETE FROM asynctask_job WHERE lane = :digest AND holds")
            statements: list[tuple[str, TextClause, dict[str, Any], TextClause | None]] = [
                ("claim of 10 jobs (the statement every fetch runs)", claim, params, None),
                (
                    "promotion of one job from a key's line, its holder gone",
                    broker.flow.statements.promote,
                    key,
                    ended,
                ),
                ("a keyed push's slot count", broker.flow.statements.free_slots, key, None),
            ]
            for title, statement, values, setup in statements:
                plan, median_ms = measured(connection, statement, values, setup)
                report += [f"### {title}: median {median_ms:.3f} ms over {REPEATS} runs", plan, ""]
        return report
    finally:
        broker.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    written = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [
        "# The SQL broker's claim next to waiting keyed jobs (PostgreSQL)",
        f"Written by `python -m bench.sql.flow_plans` on {written}.",
        f"Each scenario also holds {UNKEYED:,} unkeyed jobs and one claimable slot holder per key.",
        "",
    ]
    for waiting_per_key in (1, 100):
        with PostgresDatabase(args.pg_url, f"flow_plans_{waiting_per_key}") as db:
            lines += scenario(db.url, waiting_per_key)
    args.out.write_text("\n".join(lines) + "\n")
    print(args.out)


if __name__ == "__main__":
    main()
