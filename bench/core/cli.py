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
#: Each sized option's default and its default on --quick, said once: for its help and its setting.
SIZES: dict[str, tuple[Any, Any]] = {
    "reps": (3, 1),
    "jobs": (20_000, 100),
    "processes": ("1,2,4", "1"),
    "single_jobs": (5000, 0),
    "cmd_jobs": (3000, 0),
    "latency_jobs": (10_000, 200),
    "memory_jobs": (100_000, 1000),
    "ceiling_requests": (200_000, 20_000),
    "tracking_jobs": (20_000, 1000),
    "create_items": (100_000, 5000),
    "events": (1_000_000, 20_000),
    "get_task_calls": (4000, 200),
    "api_events": (1_000_000, 20_000),
    "api_items": (100_000, 2000),
    "api_connections": ("1,4,8,16", "4"),
    "api_duration": (10, 1),
    "sse_clients": (100, 10),
    "sse_jobs": (2000, 200),
    "sql_jobs": (20_000, 500),
    "sql_processes": ("1,2", "1"),
    "flow_jobs": (20_000, 500),
    "flow_backlog": (100_000, 1000),
    "feeds_items": (1_000_000, 2000),
    "fair_jobs": (100_000, 2000),
    "fair_tasks": (100, 10),
    "periodic_schedules": (1000, 20),
    "periodic_seconds": (30, 2),
    "integration_jobs": (20_000, 200),
    "integration_items": (100_000, 1000),
    "resumable_iterations": (1_000_000, 100_000),
}
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
    _sized(parser, "--reps", "repetitions")
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
    _sized(runtime_options, "--jobs", "jobs per drain")
    _sized(runtime_options, "--processes", "comma-separated worker process counts", str)
    runtime_options.add_argument(
        "--concurrency", default="10", help="comma-separated job slots per worker process (default 10)"
    )
    _sized(runtime_options, "--single-jobs", "jobs per one-call-per-job enqueue pass", quick_note=", none")
    _sized(runtime_options, "--cmd-jobs", "jobs in the command-count pass", quick_note=", none")
    _sized(
        runtime_options, "--latency-jobs", "jobs per latency run", quick_note=", AsyncTask and Sidekiq only"
    )
    runtime_options.add_argument(
        "--latency-rate", type=float, default=1000.0, help="jobs/s of the latency runs"
    )
    _sized(runtime_options, "--memory-jobs", "jobs per memory run", quick_note=", AsyncTask only")
    _sized(runtime_options, "--ceiling-requests", "redis-benchmark requests per command")
    tracking_options = parser.add_argument_group("tracking section")
    _sized(tracking_options, "--tracking-jobs", "jobs per tracking on/off drain")
    _sized(tracking_options, "--create-items", "items of the create_task pass")
    _sized(tracking_options, "--events", "events of the get_task task")
    _sized(tracking_options, "--get-task-calls", "get_task calls per thread count")
    api_options = parser.add_argument_group("api and sse sections")
    _sized(api_options, "--api-events", "events of the GET task")
    _sized(api_options, "--api-items", "items of each POST, JSON and CSV")
    _sized(api_options, "--api-connections", "comma-separated wrk connection counts", str)
    _sized(api_options, "--api-duration", "seconds of each wrk run")
    _sized(api_options, "--sse-clients", "SSE clients")
    _sized(api_options, "--sse-jobs", "jobs of the streamed task")
    sql_options = parser.add_argument_group("sql section (also uses --reps and --pg-url)")
    _sized(sql_options, "--sql-jobs", "jobs per drain")
    sql_options.add_argument(
        "--sql-concurrency", type=int, default=10, help="job slots per worker process (default 10)"
    )
    _sized(sql_options, "--sql-processes", "comma-separated worker process counts", str)
    _backends_option(sql_options, "sql")
    sql_options.add_argument(
        "--sql-untracked-only",
        action="store_true",
        help="leave out the AsyncTask rows with a tracked task, tracking on (--quick always does)",
    )
    flow_options = parser.add_argument_group("flow section (also uses --reps and --pg-url)")
    _sized(flow_options, "--flow-jobs", "jobs per drain, keyed or not")
    _sized(flow_options, "--flow-backlog", "keyed jobs waiting in lines in the large backlog run")
    _backends_option(flow_options, "flow")
    feeds_options = parser.add_argument_group("feeds section (also uses --reps and --pg-url)")
    _sized(feeds_options, "--feeds-items", "items of the drained task")
    feeds_options.add_argument("--feeds-parallel", type=int, default=100, help="the fed task's parallel")
    _backends_option(feeds_options, "feeds")
    fair_options = parser.add_argument_group("fair section (also uses --reps and --pg-url)")
    _sized(fair_options, "--fair-jobs", "jobs per drain, in one task or all tasks")
    _sized(fair_options, "--fair-tasks", "tasks, each of its own tenant, of the many-task drains")
    _backends_option(fair_options, "fair")
    periodic_options = parser.add_argument_group("periodic section (also uses --reps and --pg-url)")
    _sized(periodic_options, "--periodic-schedules", "schedules, every second, of the scheduled runs")
    _sized(
        periodic_options,
        "--periodic-seconds",
        "seconds of each run's measured window",
        quick_note=", and no baseline run",
    )
    _backends_option(periodic_options, "periodic")
    integrations_options = parser.add_argument_group("integrations section (also uses --reps)")
    _sized(integrations_options, "--integration-jobs", "no-op jobs per drain")
    _sized(integrations_options, "--integration-items", "items of each create_task")
    resumable_options = parser.add_argument_group("resumable section (also uses --reps and --pg-url)")
    _sized(resumable_options, "--resumable-iterations", "iterations of each measured job")
    _backends_option(resumable_options, "resumable")
    return parser


def _sized(
    group: argparse._ActionsContainer, flag: str, what: str, kind: type = int, quick_note: str = ""
) -> None:
    """An option whose default depends on --quick (``SIZES``); ``quick_note``: what the --quick
    default leaves out besides."""
    full, small = SIZES[flag.removeprefix("--").replace("-", "_")]
    group.add_argument(flag, type=kind, help=f"{what} (default {full}; --quick: {small}{quick_note})")


def _backends_option(group: argparse._ActionsContainer, section: str) -> None:
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

    def sized(dest: str) -> Any:
        return pick(getattr(args, dest), *SIZES[dest])

    reps = sized("reps")
    pg_url = postgres.shown(args.pg_url)
    nproc = os.cpu_count()
    return {
        "runtime": {
            "command": shlex.join(["python", "-m", "bench", *(sys.argv[1:] if argv is None else argv)]),
            "quick": quick,
            "reps": reps,
            "jobs": sized("jobs"),
            # 0: no such pass (--quick): its table is then left out.
            "single_jobs": sized("single_jobs"),
            "commands_jobs": sized("cmd_jobs"),
            "commands_concurrency": 10,
            "concurrency": _ints(args.concurrency),
            "processes": _ints(sized("processes")),
            "nproc": nproc,
            "ab": args.ab,
        },
        "latency": {
            "quick": quick,
            "reps": reps,
            "jobs": sized("latency_jobs"),
            "rate": args.latency_rate,
            "concurrency": 10,
            "systems": ["AsyncTask", "Sidekiq"] if quick else None,
        },
        "memory": {
            "quick": quick,
            "jobs": sized("memory_jobs"),
            "concurrency": 10,
            "idle_s": 1.0 if quick else memory.IDLE_S,
            # A smoke run checks the measurement, not every system's memory.
            "systems": ["AsyncTask"] if quick else None,
        },
        "ceiling": {"requests": sized("ceiling_requests"), "clients": 10},
        "tracking": {
            "quick": quick,
            "tracking_jobs": sized("tracking_jobs"),
            "tracking_reps": reps,
            "tracking_concurrency": 10,
            "create_items": sized("create_items"),
            "create_reps": reps,
            "events": sized("events"),
            "get_task_calls": sized("get_task_calls"),
            "get_task_threads": [1, 8],
            "pg_url": pg_url,
        },
        "api": {
            "quick": quick,
            "events": sized("api_events"),
            "items": sized("api_items"),
            "connections": _ints(sized("api_connections")),
            "duration_s": sized("api_duration"),
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
            "clients": sized("sse_clients"),
            "jobs": sized("sse_jobs"),
            "pg_url": pg_url,
        },
        "sql": {
            "quick": quick,
            "jobs": sized("sql_jobs"),
            "reps": reps,
            "concurrency": args.sql_concurrency,
            "processes": _ints(sized("sql_processes")),
            "backends": _names(args.sql_backends),
            "tracked": not (quick or args.sql_untracked_only),
            "pg_url": pg_url,
        },
        "flow": {
            "quick": quick,
            "reps": reps,
            "jobs": sized("flow_jobs"),
            "keys": pick(None, 1000, 100),
            "processes": 1,
            "concurrency": 10,
            "hot_jobs": pick(None, 5000, 300),
            "backlog_jobs": sized("flow_jobs"),
            "backlog_processes": 4,
            "backlogs": [pick(None, 1000, 100), sized("flow_backlog")],
            "parked_keys": pick(None, 1000, 100),
            "backends": _names(args.flow_backends),
            "pg_url": pg_url,
        },
        "feeds": {
            "quick": quick,
            "reps": reps,
            "items": sized("feeds_items"),
            "parallel": args.feeds_parallel,
            "processes": 2,
            "concurrency": 10,
            "backends": _names(args.feeds_backends),
            "pg_url": pg_url,
        },
        "fair": {
            "quick": quick,
            "reps": reps,
            "jobs": sized("fair_jobs"),
            # --quick: each task's creation is a transaction of its own, which would outlast
            # the drains of its few jobs.
            "tasks": sized("fair_tasks"),
            # As the feeds section's drains: comparable rates on the same machine.
            "processes": 2,
            "concurrency": 10,
            "backends": _names(args.fair_backends),
            "pg_url": pg_url,
        },
        "periodic": {
            "quick": quick,
            "reps": reps,
            "schedules": sized("periodic_schedules"),
            "seconds": sized("periodic_seconds"),
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
            "jobs": sized("integration_jobs"),
            "items": sized("integration_items"),
        },
        "resumable": {
            "quick": quick,
            "reps": reps,
            "iterations": sized("resumable_iterations"),
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
