"""``python -m bench [--quick] [--reps N] [--jobs N] ...``: run the benchmark, print and save tables.

Order of work, so that noise hits every configuration alike:

1. for each repetition: every (system, concurrency) processing run in turn (each starts with
   its push_bulk enqueue), then every system's perform_async enqueue pass;
2. one Redis-command-count pass per system;
3. the tracking section (``bench/tracking_bench.py``): tracking on vs off, create_task,
   get_task on a big task;
4. the api section (``bench/api_bench.py``): ``GET /api/tasks/<id>`` under wrk load, POSTs
   of many items as JSON and CSV (needs wrk);
5. the sql section (``bench/sql_bench.py``): no-op drain throughput of AsyncTask's SQL broker
   on SQLite and PostgreSQL, 1 and 2 worker processes, next to Huey's SqliteHuey and
   procrastinate (installed by the bench into ``bench/.peers-venv``);
6. tables to stdout, RESULTS.md, runtime.json, tracking.json, api.json and sql.json to ``--out``.

``--sections runtime``, ``tracking``, ``api`` or ``sql`` (comma-separated) runs only those:
it rewrites only their own JSON files, and their sections of RESULTS.md (the others are kept
from the previous RESULTS.md, with a note saying which run each section comes from).

The private redis-server and all workers are killed on any exit path (error, Ctrl-C, TERM).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from bench import (
    api_bench,
    api_report,
    asynctask_bench,
    machine,
    procs,
    report,
    runner,
    sidekiq_bench,
    sql_bench,
    sql_report,
    tracking_bench,
    tracking_db,
    tracking_report,
)
from bench.redis_server import RedisServer
from bench.system import ROOT, System

SECTIONS = ("runtime", "tracking", "api", "sql")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: N=2000, 1 rep (CI)")
    parser.add_argument("--reps", type=int, help="repetitions (default 3; --quick: 1)")
    parser.add_argument("--jobs", type=int, help="jobs per processing run (default 20000; --quick: 2000)")
    parser.add_argument(
        "--single-jobs", type=int, help="jobs per perform_async pass (default 5000; --quick: 1000)"
    )
    parser.add_argument(
        "--cmd-jobs", type=int, help="jobs in the command-count pass (default 3000; --quick: 2000)"
    )
    parser.add_argument(
        "--concurrency", default="10,25", help="comma-separated worker thread counts (default 10,25)"
    )
    parser.add_argument(
        "--no-sidekiq", action="store_true", help="AsyncTask only (also automatic without Ruby)"
    )
    parser.add_argument(
        "--out", type=Path, help="results directory (default bench/results; --quick: .../quick)"
    )
    tracking = parser.add_argument_group("tracking section")
    tracking.add_argument(
        "--sections",
        default=",".join(SECTIONS),
        help="comma-separated: runtime, tracking, api, sql (default all four)",
    )
    tracking.add_argument(
        "--tracking-jobs", type=int, help="jobs per tracking on/off drain (default 20000; --quick: 2000)"
    )
    tracking.add_argument(
        "--create-items", type=int, help="items of the create_task pass (default 100000; --quick: 20000)"
    )
    tracking.add_argument(
        "--events", type=int, help="events of the get_task task (default 1000000; --quick: 100000)"
    )
    tracking.add_argument(
        "--get-task-calls", type=int, help="get_task calls per thread count (default 4000; --quick: 500)"
    )
    tracking.add_argument(
        "--pg-url",
        default=tracking_db.DEFAULT_PG_URL,
        help="PostgreSQL to create the bench's own database from (default %(default)s)",
    )
    api = parser.add_argument_group("api section")
    api.add_argument(
        "--api-events", type=int, help="events of the GET task (default 1000000; --quick: 100000)"
    )
    api.add_argument(
        "--api-items", type=int, help="items of each POST, JSON and CSV (default 100000; --quick: 10000)"
    )
    api.add_argument(
        "--api-connections", help="comma-separated wrk connection counts (default 1,4,8,16; --quick: 1,4)"
    )
    api.add_argument("--api-duration", type=int, help="seconds of each wrk run (default 10; --quick: 2)")
    sql = parser.add_argument_group("sql section (also uses --reps and --pg-url)")
    sql.add_argument("--sql-jobs", type=int, help="jobs per drain (default 20000; --quick: 1000)")
    sql.add_argument(
        "--sql-concurrency", type=int, default=10, help="job slots per worker process (default 10)"
    )
    sql.add_argument(
        "--sql-processes", help="comma-separated worker process counts (default 1,2; --quick: 1)"
    )
    sql.add_argument(
        "--sql-backends", default="sqlite,postgresql", help="comma-separated (default sqlite,postgresql)"
    )
    sql.add_argument(
        "--sql-untracked-only",
        action="store_true",
        help="leave out the AsyncTask rows with a tracked task, tracking on (--quick always does)",
    )
    return parser


def _raise_interrupt(signum: int, _frame: FrameType | None) -> None:
    # TERM and HUP unwind like Ctrl-C, so the finally blocks stop Redis and the workers. INT
    # is set too: a shell starting us in the background would otherwise leave it ignored.
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    quick = bool(args.quick)
    jobs = args.jobs or (2000 if quick else 20_000)
    settings = {
        "command": shlex.join(["python", "-m", "bench", *(sys.argv[1:] if argv is None else argv)]),
        "quick": quick,
        "reps": args.reps or (1 if quick else 3),
        "jobs": jobs,
        "single_jobs": args.single_jobs or (1000 if quick else 5000),
        "commands_jobs": args.cmd_jobs or (2000 if quick else 3000),
        "commands_concurrency": 10,
        "concurrency": [int(c) for c in args.concurrency.split(",")],
    }
    sections = {name.strip() for name in args.sections.split(",") if name.strip()}
    if not sections or not sections <= set(SECTIONS):
        raise SystemExit(f"--sections takes runtime, tracking, api and/or sql, not {args.sections!r}")
    settings["sections"] = [name for name in SECTIONS if name in sections]
    if "api" in sections and (missing := api_bench.wrk_missing()) is not None:
        raise SystemExit(f"python -m bench: {missing}")
    tracking_settings = {
        "quick": quick,
        "tracking_jobs": args.tracking_jobs or (2000 if quick else 20_000),
        "tracking_reps": settings["reps"],
        "tracking_concurrency": 10,
        "create_items": args.create_items or (20_000 if quick else 100_000),
        "create_reps": settings["reps"],
        "events": args.events or (100_000 if quick else 1_000_000),
        "get_task_calls": args.get_task_calls or (500 if quick else 4000),
        "get_task_threads": [1, 8],
        "pg_url": tracking_db.shown(args.pg_url),
    }
    api_settings = {
        "quick": quick,
        "events": args.api_events or (100_000 if quick else 1_000_000),
        "items": args.api_items or (10_000 if quick else 100_000),
        "connections": [
            int(c) for c in (args.api_connections or ("1,4" if quick else "1,4,8,16")).split(",")
        ],
        "duration_s": args.api_duration or (2 if quick else 10),
        "warmup_s": api_bench.WARMUP_S,
        "reps": settings["reps"],
        "post_reps": settings["reps"],
        "workers": api_bench.WORKERS,
        "threads": api_bench.THREADS,
        "nproc": os.cpu_count(),
        "pg_url": tracking_db.shown(args.pg_url),
    }
    sql_settings = {
        "quick": quick,
        "jobs": args.sql_jobs or (1000 if quick else 20_000),
        "reps": settings["reps"],
        "concurrency": args.sql_concurrency,
        "processes": [int(p) for p in (args.sql_processes or ("1" if quick else "1,2")).split(",")],
        "backends": [b.strip() for b in args.sql_backends.split(",") if b.strip()],
        "tracked": not (quick or args.sql_untracked_only),
        "pg_url": tracking_db.shown(args.pg_url),
    }
    if not sql_settings["backends"] or not set(sql_settings["backends"]) <= {"sqlite", "postgresql"}:
        raise SystemExit(f"--sql-backends takes sqlite and/or postgresql, not {args.sql_backends!r}")
    api_results: api_bench.ApiResults | None = None
    sql_results: sql_bench.SqlResults | None = None
    systems: list[System] = [asynctask_bench.SYSTEM]
    if "runtime" in sections and not args.no_sidekiq:
        if sidekiq_bench.available():
            systems.append(sidekiq_bench.SYSTEM)
        else:
            print("ruby/sidekiq not found: running AsyncTask only", file=sys.stderr)
    out_dir = args.out or (ROOT / "bench" / "results" / ("quick" if quick else ""))
    results = report.Results(settings, {s.name: s.describe() for s in systems})

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _raise_interrupt)
    load_at_start = machine.load_average()
    workdir = Path(tempfile.mkdtemp(prefix="asynctask-bench-"))
    try:
        with RedisServer(workdir) as server:
            if "runtime" in sections:
                _run_all(results, systems, server, workdir)
            if "tracking" in sections:
                results.tracking = tracking_bench.run(tracking_settings, args.pg_url, server, workdir)
            if "api" in sections:
                api_results = api_bench.run(api_settings, args.pg_url, server, workdir)
            if "sql" in sections:
                sql_results = sql_bench.run(sql_settings, args.pg_url, workdir)
            results.machine = machine.describe(server, len(systems) > 1, load_at_start)
            if results.tracking is not None:
                results.machine.update(results.tracking.versions)
            if api_results is not None:
                results.machine.update(api_results.versions)
            if sql_results is not None:
                results.machine.update(sql_results.versions)
    except KeyboardInterrupt:
        print("\ninterrupted: workers and redis-server stopped, nothing written", file=sys.stderr)
        return 130
    finally:
        procs.kill_all()
        if _errors(results, api_results, sql_results):
            print(f"worker logs kept in {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    if results.process:
        print(report.tables(results))
    if results.tracking is not None:
        print(tracking_report.tables(results.tracking))
    if api_results is not None:
        print(api_report.tables(api_results))
    if sql_results is not None:
        print(sql_report.tables(sql_results))
    results_md = out_dir / "RESULTS.md"
    previous = results_md.read_text(encoding="utf-8") if results_md.exists() else None
    report.write(results, out_dir)
    if api_results is not None:
        api_report.write(api_results, results.machine, out_dir)
    if sql_results is not None:
        sql_report.write(sql_results, results.machine, out_dir)
    if previous is not None:
        fresh = results_md.read_text(encoding="utf-8")
        results_md.write_text(report.keep_earlier(previous, fresh), encoding="utf-8")
    print(f"wrote RESULTS.md and raw data to {out_dir}", file=sys.stderr)
    return 1 if _errors(results, api_results, sql_results) else 0


def _errors(
    results: report.Results, api: api_bench.ApiResults | None, sql: sql_bench.SqlResults | None
) -> list[str]:
    return (
        results.errors()
        + (api.errors() if api is not None else [])
        + (sql.errors() if sql is not None else [])
    )


def _run_all(results: report.Results, systems: list[System], server: RedisServer, workdir: Path) -> None:
    s = results.settings
    for rep in range(s["reps"]):
        for concurrency in s["concurrency"]:
            for system in systems:
                run = runner.process(system, server, concurrency, s["jobs"], workdir)
                results.process.append((rep, run))
                _progress(f"rep {rep + 1}/{s['reps']} {system.name} c={concurrency}", run)
        for system in systems:
            single = runner.enqueue(system, server, "single", s["single_jobs"])
            results.single.append((rep, single))
            print(
                f"rep {rep + 1}/{s['reps']} {system.name} perform_async: {single.rate:,.0f}/s",
                file=sys.stderr,
            )
    for system in systems:
        run = runner.process(system, server, s["commands_concurrency"], s["commands_jobs"], workdir)
        results.commands.append(run)
        _progress(f"commands {system.name}", run)


def _progress(label: str, run: runner.ProcessRun) -> None:
    if run.error:
        print(f"{label}: FAILED: {run.error}", file=sys.stderr)
        return
    print(
        f"{label}: enqueue {run.enqueue.rate:,.0f}/s, steady {run.steady_rate:,.0f}/s, "
        f"incl. start-up {run.total_rate:,.0f}/s, {run.redis_cmds / run.jobs:.2f} cmds/job",
        file=sys.stderr,
    )


if __name__ == "__main__":
    raise SystemExit(main())
