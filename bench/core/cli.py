"""``python -m bench [--quick] [--sections ...] ...``: run the benchmark, print and save tables.

Order of work, so that noise hits every configuration alike (each section is a package of
``bench/``):

1. runtime: for each repetition, every (worker processes, system) drain of N no-op jobs in
   turn, in an order reversed every other repetition (each starts with the system's bulk
   enqueue; AsyncTask, with ``--ab REF`` AsyncTask as of git REF right after it, Ruby Sidekiq
   and the Python peers of ``bench/runtime/redis_peers.py``, installed by the bench into
   ``bench/.peers-venv``), then every system's one-call-per-job enqueue pass; then one
   Redis-command-count pass per system;
2. latency: enqueue-to-start latency at a steady rate, every system in turn, per repetition;
3. memory: one worker per system, RSS idle and while it runs 100,000 jobs;
4. ceiling: ``redis-benchmark`` of the commands on AsyncTask's hot path;
5. tracking: tracking on vs off, create_task, get_task;
6. api: ``GET /api/tasks/<id>`` under wrk load, bulk POSTs (needs wrk);
7. sse: one task's event stream fanned out to many clients;
8. sql: AsyncTask's SQL broker on SQLite and PostgreSQL next to Huey and procrastinate;
9. flow: what concurrency keys cost the queue on Redis and PostgreSQL (``bench/flow``);
10. feeds: what feeding a task costs its drain, on Redis and PostgreSQL (``bench/feeds``);
11. fair: a fair queue's drain against the same queue served in push order, one task and many
    tenants' tasks, on Redis and PostgreSQL (``bench/fair``);
12. periodic: the workers' CPU with many schedules every second against none, and each tick's
    lag to its job, on Redis and PostgreSQL (``bench/periodic``);
13. resumable: a job of many no-op iterations, resumable against the same loop as a plain job,
    on Redis and PostgreSQL (``bench/resumable``);
14. integrations: Celery, RQ and Dramatiq with tracking attached against themselves without,
    and ``create_task`` through each against its own bulk send (``bench/integrations``);
15. tables to stdout; RESULTS.md, one JSON file per section and the PNG plots to ``--out``.

``--sections`` (comma-separated) runs only those: it rewrites only their own JSON files and
RESULTS.md sections (the others are kept from the previous RESULTS.md, with a note saying
which run each section comes from). The Targets section compares with what ran in this run.

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
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from asynctask import Settings
from bench.api import section as api
from bench.api import server as api_server
from bench.ceiling import section as ceiling
from bench.core import document, machine, plots, postgres, procs, sections, targets
from bench.core.redis_server import RedisServer
from bench.core.system import ROOT, System, byte_compile
from bench.memory import section as memory
from bench.runtime import asynctask_system, systems

SECTIONS = tuple(section.name for section in sections.SECTIONS)
#: The brokers each section with a ``--<section>-backends`` option can run on, the default all.
BACKENDS = {
    "sql": ("sqlite", "postgresql"),
    "flow": ("redis", "postgresql"),
    "feeds": ("redis", "postgresql"),
    "fair": ("redis", "postgresql"),
    "periodic": ("redis", "postgresql"),
    "resumable": ("redis", "postgresql"),
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run (CI): small N, 1 rep, fewer runs")
    parser.add_argument(
        "--sections",
        default=",".join(SECTIONS),
        help=f"comma-separated, of: {', '.join(SECTIONS)} (default all)",
    )
    parser.add_argument("--reps", type=int, help="repetitions (default 3; --quick: 1)")
    parser.add_argument(
        "--out", type=Path, help="results directory (default bench/results; --quick: .../quick)"
    )
    parser.add_argument(
        "--pg-url",
        default=postgres.DEFAULT_PG_URL,
        help="PostgreSQL to create the bench's own databases from (default %(default)s)",
    )
    runtime_options = parser.add_argument_group("runtime, latency and memory sections")
    runtime_options.add_argument(
        "--systems",
        default=",".join(systems.NAMES),
        help="comma-separated systems to compare (default all: %(default)s)",
    )
    runtime_options.add_argument(
        "--ab",
        metavar="REF",
        help="also run AsyncTask as of git REF (branch, tag or commit) right after this tree's, in an order "
        "reversed every other repetition, and give this tree ÷ REF per repetition",
    )
    runtime_options.add_argument("--jobs", type=int, help="jobs per drain (default 20000; --quick: 100)")
    runtime_options.add_argument(
        "--processes", help="comma-separated worker process counts (default 1,2,4; --quick: 1)"
    )
    runtime_options.add_argument(
        "--concurrency", default="10", help="comma-separated job slots per worker process (default 10)"
    )
    runtime_options.add_argument(
        "--single-jobs",
        type=int,
        help="jobs per one-call-per-job enqueue pass (default 5000; --quick: 0, none)",
    )
    runtime_options.add_argument(
        "--cmd-jobs", type=int, help="jobs in the command-count pass (default 3000; --quick: 0, none)"
    )
    runtime_options.add_argument(
        "--latency-jobs",
        type=int,
        help="jobs per latency run (default 10000; --quick: 200, AsyncTask and Sidekiq only)",
    )
    runtime_options.add_argument(
        "--latency-rate", type=float, default=1000.0, help="jobs/s of the latency runs"
    )
    runtime_options.add_argument(
        "--memory-jobs", type=int, help="jobs per memory run (default 100000; --quick: 1000, AsyncTask only)"
    )
    runtime_options.add_argument(
        "--ceiling-requests", type=int, help="redis-benchmark requests per command (default 200000)"
    )
    tracking_options = parser.add_argument_group("tracking section")
    tracking_options.add_argument(
        "--tracking-jobs", type=int, help="jobs per tracking on/off drain (default 20000; --quick: 1000)"
    )
    tracking_options.add_argument(
        "--create-items", type=int, help="items of the create_task pass (default 100000; --quick: 5000)"
    )
    tracking_options.add_argument(
        "--events", type=int, help="events of the get_task task (default 1000000; --quick: 20000)"
    )
    tracking_options.add_argument(
        "--get-task-calls", type=int, help="get_task calls per thread count (default 4000; --quick: 200)"
    )
    api_options = parser.add_argument_group("api and sse sections")
    api_options.add_argument(
        "--api-events", type=int, help="events of the GET task (default 1000000; --quick: 20000)"
    )
    api_options.add_argument(
        "--api-items", type=int, help="items of each POST, JSON and CSV (default 100000; --quick: 2000)"
    )
    api_options.add_argument(
        "--api-connections", help="comma-separated wrk connection counts (default 1,4,8,16; --quick: 4)"
    )
    api_options.add_argument(
        "--api-duration", type=int, help="seconds of each wrk run (default 10; --quick: 1)"
    )
    api_options.add_argument("--sse-clients", type=int, help="SSE clients (default 100; --quick: 10)")
    api_options.add_argument(
        "--sse-jobs", type=int, help="jobs of the streamed task (default 2000; --quick: 200)"
    )
    sql_options = parser.add_argument_group("sql section (also uses --reps and --pg-url)")
    sql_options.add_argument("--sql-jobs", type=int, help="jobs per drain (default 20000; --quick: 100)")
    sql_options.add_argument(
        "--sql-concurrency", type=int, default=10, help="job slots per worker process (default 10)"
    )
    sql_options.add_argument(
        "--sql-processes", help="comma-separated worker process counts (default 1,2; --quick: 1)"
    )
    _backends_option(sql_options, "sql")
    sql_options.add_argument(
        "--sql-untracked-only",
        action="store_true",
        help="leave out the AsyncTask rows with a tracked task, tracking on (--quick always does)",
    )
    flow_options = parser.add_argument_group("flow section (also uses --reps and --pg-url)")
    flow_options.add_argument(
        "--flow-jobs", type=int, help="jobs per drain, keyed or not (default 20000; --quick: 500)"
    )
    flow_options.add_argument(
        "--flow-backlog",
        type=int,
        help="keyed jobs waiting in lines in the large backlog run (default 100000; --quick: 1000)",
    )
    _backends_option(flow_options, "flow")
    feeds_options = parser.add_argument_group("feeds section (also uses --reps and --pg-url)")
    feeds_options.add_argument(
        "--feeds-items", type=int, help="items of the drained task (default 1000000; --quick: 2000)"
    )
    feeds_options.add_argument("--feeds-parallel", type=int, default=100, help="the fed task's parallel")
    _backends_option(feeds_options, "feeds")
    fair_options = parser.add_argument_group("fair section (also uses --reps and --pg-url)")
    fair_options.add_argument(
        "--fair-jobs",
        type=int,
        help="jobs per drain, in one task or all tasks (default 100000; --quick: 2000)",
    )
    fair_options.add_argument(
        "--fair-tasks",
        type=int,
        help="tasks, each of its own tenant, of the many-task drains (default 100; --quick: 10)",
    )
    _backends_option(fair_options, "fair")
    periodic_options = parser.add_argument_group("periodic section (also uses --reps and --pg-url)")
    periodic_options.add_argument(
        "--periodic-schedules",
        type=int,
        help="schedules, every second, of the scheduled runs (default 1000; --quick: 20)",
    )
    periodic_options.add_argument(
        "--periodic-seconds",
        type=int,
        help="seconds of each run's measured window (default 30; --quick: 2, and no baseline run)",
    )
    _backends_option(periodic_options, "periodic")
    integrations_options = parser.add_argument_group("integrations section (also uses --reps)")
    integrations_options.add_argument(
        "--integration-jobs", type=int, help="no-op jobs per drain (default 20000; --quick: 200)"
    )
    integrations_options.add_argument(
        "--integration-items", type=int, help="items of each create_task (default 100000; --quick: 1000)"
    )
    resumable_options = parser.add_argument_group("resumable section (also uses --reps and --pg-url)")
    resumable_options.add_argument(
        "--resumable-iterations",
        type=int,
        help="iterations of each measured job (default 1000000; --quick: 100000)",
    )
    _backends_option(resumable_options, "resumable")
    return parser


def _backends_option(group: argparse._ArgumentGroup, section: str) -> None:
    default = ",".join(BACKENDS[section])
    group.add_argument(f"--{section}-backends", default=default, help=f"comma-separated (default {default})")


def _raise_interrupt(signum: int, _frame: FrameType | None) -> None:
    # TERM and HUP unwind like Ctrl-C, so the finally blocks stop Redis and the workers. INT
    # is set too: a shell starting us in the background would otherwise leave it ignored.
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _ints(text: str) -> list[int]:
    return [int(part) for part in _names(text)]


def _settings(args: argparse.Namespace, argv: Sequence[str] | None) -> dict[str, dict[str, Any]]:
    """Every section's settings, from the options and the --quick defaults."""
    quick = bool(args.quick)

    def pick(value: Any, full: Any, small: Any) -> Any:
        return value if value is not None else (small if quick else full)

    reps = pick(args.reps, 3, 1)
    pg_url = postgres.shown(args.pg_url)
    nproc = os.cpu_count()
    return {
        "runtime": {
            "command": shlex.join(["python", "-m", "bench", *(sys.argv[1:] if argv is None else argv)]),
            "quick": quick,
            "reps": reps,
            "jobs": pick(args.jobs, 20_000, 100),
            # 0: no such pass (--quick): its table is then left out.
            "single_jobs": pick(args.single_jobs, 5000, 0),
            "commands_jobs": pick(args.cmd_jobs, 3000, 0),
            "commands_concurrency": 10,
            "concurrency": _ints(args.concurrency),
            "processes": _ints(pick(args.processes, "1,2,4", "1")),
            "nproc": nproc,
            "ab": args.ab,
        },
        "latency": {
            "quick": quick,
            "reps": reps,
            "jobs": pick(args.latency_jobs, 10_000, 200),
            "rate": args.latency_rate,
            "concurrency": 10,
            "systems": ["AsyncTask", "Sidekiq"] if quick else None,
        },
        "memory": {
            "quick": quick,
            "jobs": pick(args.memory_jobs, 100_000, 1000),
            "concurrency": 10,
            "idle_s": 1.0 if quick else memory.IDLE_S,
            # A smoke run checks the measurement, not every system's memory.
            "systems": ["AsyncTask"] if quick else None,
        },
        "ceiling": {"requests": pick(args.ceiling_requests, 200_000, 20_000), "clients": 10},
        "tracking": {
            "quick": quick,
            "tracking_jobs": pick(args.tracking_jobs, 20_000, 1000),
            "tracking_reps": reps,
            "tracking_concurrency": 10,
            "create_items": pick(args.create_items, 100_000, 5000),
            "create_reps": reps,
            "events": pick(args.events, 1_000_000, 20_000),
            "get_task_calls": pick(args.get_task_calls, 4000, 200),
            "get_task_threads": [1, 8],
            "pg_url": pg_url,
        },
        "api": {
            "quick": quick,
            "events": pick(args.api_events, 1_000_000, 20_000),
            "items": pick(args.api_items, 100_000, 2000),
            "connections": _ints(pick(args.api_connections, "1,4,8,16", "4")),
            "duration_s": pick(args.api_duration, 10, 1),
            "warmup_s": 1 if quick else api.WARMUP_S,
            "reps": reps,
            "post_reps": reps,
            "workers": api_server.WORKERS,
            "threads": api_server.THREADS,
            "nproc": nproc,
            "pg_url": pg_url,
        },
        "sse": {
            "quick": quick,
            "clients": pick(args.sse_clients, 100, 10),
            "jobs": pick(args.sse_jobs, 2000, 200),
            "pg_url": pg_url,
        },
        "sql": {
            "quick": quick,
            "jobs": pick(args.sql_jobs, 20_000, 500),
            "reps": reps,
            "concurrency": args.sql_concurrency,
            "processes": _ints(pick(args.sql_processes, "1,2", "1")),
            "backends": _names(args.sql_backends),
            "tracked": not (quick or args.sql_untracked_only),
            "pg_url": pg_url,
        },
        "flow": {
            "quick": quick,
            "reps": reps,
            "jobs": pick(args.flow_jobs, 20_000, 500),
            "keys": pick(None, 1000, 100),
            "processes": 1,
            "concurrency": 10,
            "hot_jobs": pick(None, 5000, 300),
            "backlog_jobs": pick(args.flow_jobs, 20_000, 500),
            "backlog_processes": 4,
            "backlogs": [pick(None, 1000, 100), pick(args.flow_backlog, 100_000, 1000)],
            "parked_keys": pick(None, 1000, 100),
            "backends": _names(args.flow_backends),
            "pg_url": pg_url,
        },
        "feeds": {
            "quick": quick,
            "reps": reps,
            "items": pick(args.feeds_items, 1_000_000, 2000),
            "parallel": args.feeds_parallel,
            "processes": 2,
            "concurrency": 10,
            "backends": _names(args.feeds_backends),
            "pg_url": pg_url,
        },
        "fair": {
            "quick": quick,
            "reps": reps,
            "jobs": pick(args.fair_jobs, 100_000, 2000),
            # --quick: each task's creation is a transaction of its own, which would outlast
            # the drains of its few jobs.
            "tasks": pick(args.fair_tasks, 100, 10),
            # As the feeds section's drains: comparable rates on the same machine.
            "processes": 2,
            "concurrency": 10,
            "backends": _names(args.fair_backends),
            "pg_url": pg_url,
        },
        "periodic": {
            "quick": quick,
            "reps": reps,
            "schedules": pick(args.periodic_schedules, 1000, 20),
            "seconds": pick(args.periodic_seconds, 30, 2),
            # --quick: the scheduled runs alone; a baseline only serves the judged difference.
            "baseline": not quick,
            "processes": 2,
            "concurrency": 10,
            "backends": _names(args.periodic_backends),
            "pg_url": pg_url,
        },
        "integrations": {
            "quick": quick,
            "reps": reps,
            "jobs": pick(args.integration_jobs, 20_000, 200),
            "items": pick(args.integration_items, 100_000, 1000),
        },
        "resumable": {
            "quick": quick,
            "reps": reps,
            "iterations": pick(args.resumable_iterations, 1_000_000, 100_000),
            # The worker runs with the default: the section measures what a job gets unless it asks.
            "checkpoint_interval": Settings().checkpoint_interval,
            "backends": _names(args.resumable_backends),
            "pg_url": pg_url,
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    chosen = set(_names(args.sections))
    if not chosen or not chosen <= set(SECTIONS):
        raise SystemExit(f"--sections takes {', '.join(SECTIONS)}, not {args.sections!r}")
    settings = _settings(args, argv)
    settings["runtime"]["sections"] = [name for name in SECTIONS if name in chosen]
    if {"api", "sse"} & chosen and (missing := api.wrk_missing()) is not None:
        raise SystemExit(f"python -m bench: {missing}")
    for section, allowed in BACKENDS.items():
        backends = settings[section]["backends"]
        if not backends or not set(backends) <= set(allowed):
            given = getattr(args, f"{section}_backends")
            raise SystemExit(f"--{section}-backends takes {' and/or '.join(allowed)}, not {given!r}")
    if settings["fair"]["tasks"] < 2 or settings["fair"]["jobs"] < settings["fair"]["tasks"]:
        raise SystemExit("--fair-tasks takes 2 or more, and --fair-jobs at least one job per task")
    if settings["periodic"]["schedules"] < 1 or settings["periodic"]["seconds"] < 1:
        raise SystemExit("--periodic-schedules and --periodic-seconds take 1 or more")
    if settings["resumable"]["iterations"] < 1:
        raise SystemExit("--resumable-iterations takes 1 or more")
    if "ceiling" in chosen and (missing := ceiling.missing()) is not None:
        raise SystemExit(f"python -m bench: {missing}")
    out_dir = args.out or (ROOT / "bench" / "results" / ("quick" if args.quick else ""))

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _raise_interrupt)
    # Every process the bench starts imports this tree's packages: as installed, compiled.
    byte_compile(ROOT / "asynctask", ROOT / "bench", ROOT / "webapi")
    load_at_start = machine.load_average()
    workdir = Path(tempfile.mkdtemp(prefix="asynctask-bench-"))
    run = sections.Run(settings)
    try:
        if {"runtime", "latency", "memory"} & chosen:
            wanted = _names(args.systems)
            run.systems, run.runtime.skipped = systems.available(wanted)
            if args.ab is not None:
                run.systems = _with_reference(run.systems, args.ab, workdir)
            run.runtime.configs = {system.name: system.describe() for system in run.systems}
        elif args.ab is not None:
            raise SystemExit("--ab compares drains: it needs the runtime, latency or memory section")
        with RedisServer(workdir) as server:
            _run_sections(run, chosen, server, workdir, args.pg_url)
            run.machine = machine.describe(server, run.systems, load_at_start)
            for versions in run.versions():
                run.machine.update(versions)
    except KeyboardInterrupt:
        print("\ninterrupted: workers and redis-server stopped, nothing written", file=sys.stderr)
        return 130
    finally:
        procs.kill_all()
        if run.errors():
            print(f"worker logs kept in {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print(run.tables())
    _write(run, out_dir)
    print(f"wrote RESULTS.md, raw data and plots to {out_dir}", file=sys.stderr)
    return 1 if run.errors() else 0


def _with_reference(chosen: list[System], ref: str, workdir: Path) -> list[System]:
    """``chosen`` with AsyncTask as of ``ref`` right after this tree's AsyncTask."""
    names = [system.name for system in chosen]
    if asynctask_system.SYSTEM.name not in names:
        raise SystemExit("--ab compares with this tree's AsyncTask: keep AsyncTask in --systems")
    at = names.index(asynctask_system.SYSTEM.name) + 1
    return [*chosen[:at], asynctask_system.at_ref(ref, workdir), *chosen[at:]]


def _run_sections(
    run: sections.Run, chosen: set[str], server: RedisServer, workdir: Path, pg_url: str
) -> None:
    context = sections.Context(run, server, workdir, pg_url)
    for section in sections.SECTIONS:
        if section.name in chosen:
            started = time.monotonic()
            run.found[section.name] = section.run(context)
            run.seconds[section.name] = time.monotonic() - started
            print(f"== section {section.name}: {run.seconds[section.name]:.0f} s", file=sys.stderr)


def _write(run: sections.Run, out_dir: Path) -> None:
    results_md = out_dir / "RESULTS.md"
    # A run of every section replaces the report; a partial one keeps the other sections.
    partial = set(run.settings["runtime"]["sections"]) != set(SECTIONS)
    previous = results_md.read_text(encoding="utf-8") if partial and results_md.exists() else None
    sections.write(run, out_dir)
    if previous is not None:
        fresh = results_md.read_text(encoding="utf-8")
        results_md.write_text(document.keep_earlier(previous, fresh), encoding="utf-8")
    targets.write(run, out_dir)
    plots.write(out_dir)
