"""``python -m bench.callbacks``: what a task's callback costs its drain, on PostgreSQL.

Each repetition drains one task of N no-op jobs twice, in an order reversed every other
repetition: once plain, once with an ``on_complete`` job (one worker process, ``-c 10``, a
private Redis, the tracking tables of a private PostgreSQL database emptied before each drain;
the tracking section's drain, ``bench/tracking/drain.py``). Per drain: jobs per second from the
first job done until ``get_task`` reports every job finished (what a front end waiting for the
end sees), and, with the callback, the seconds from that report to the callback's run.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench.core.fmt import fixed, rate, ratio, spread, table
from bench.core.postgres import add_pg_url, require_postgres
from bench.core.redis_server import RedisServer
from bench.tracking.db import PostgresDatabase
from bench.tracking.drain import DrainRun, drain


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.callbacks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=20000, help="jobs of the task drained per run")
    parser.add_argument("--concurrency", type=int, default=10)
    add_pg_url(parser)
    args = parser.parse_args(argv)
    require_postgres(args.pg_url)
    runs: dict[bool, list[DrainRun]] = {False: [], True: []}
    with (
        tempfile.TemporaryDirectory(prefix="bench-callbacks-") as tmp,
        RedisServer(Path(tmp)) as server,
        PostgresDatabase(args.pg_url) as database,
    ):
        for rep in range(args.reps):
            for callback in (False, True) if rep % 2 == 0 else (True, False):
                done = drain(
                    "postgresql",
                    database.fresh(),
                    server,
                    args.jobs,
                    args.concurrency,
                    Path(tmp),
                    callback=callback,
                )
                if done.error:
                    raise SystemExit(f"rep {rep + 1} ({'callback' if callback else 'plain'}): {done.error}")
                runs[callback].append(done)
                print(
                    f"rep {rep + 1}/{args.reps} {'with on_complete' if callback else 'plain'}: "
                    f"{done.caught_up_rate:,.0f} jobs/s until SQL showed the end"
                    + (f", callback ran {done.callback_s * 1000:.0f} ms after" if callback else ""),
                    flush=True,
                )
    print("\n".join(_report(runs)))


def _report(runs: dict[bool, list[DrainRun]]) -> list[str]:
    plain, called = runs[False], runs[True]
    ratios = [c.caught_up_rate / p.caught_up_rate for p, c in zip(plain, called, strict=True)]
    return [
        "",
        *table(
            ["", "plain", "with on_complete", "with ÷ plain"],
            [
                [
                    "jobs/s until SQL showed the end (median, range)",
                    spread([r.caught_up_rate for r in plain], rate),
                    spread([r.caught_up_rate for r in called], rate),
                    f"{ratio(statistics.median(ratios))} ({', '.join(ratio(r) for r in ratios)})",
                ],
                [
                    "jobs/s while the jobs ran",
                    spread([r.steady_rate for r in plain], rate),
                    spread([r.steady_rate for r in called], rate),
                    ratio(
                        statistics.median(
                            c.steady_rate / p.steady_rate for p, c in zip(plain, called, strict=True)
                        )
                    ),
                ],
                [
                    "callback ran after the end showed (ms)",
                    "",
                    spread([r.callback_s * 1000 for r in called], fixed(0)),
                    "",
                ],
            ],
        ),
    ]


if __name__ == "__main__":
    main()
