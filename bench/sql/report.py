"""The sql section of RESULTS.md and stdout, and ``sql.json``.

As in the other sections: medians of the repetitions with (min-max); ratios are taken per
repetition between the interleaved runs of the two systems, then summarised.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.core.document import write_section
from bench.core.fmt import fixed, rate, ratio, section_text, spread, table, titled
from bench.core.report import CPU_COLUMNS, USAGE_COLUMNS, per_job_us, usage_cells
from bench.sql.section import SqlResults, SqlRun
from bench.sql.systems import POSTGRESQL, SQLITE

SECTION = "SQL queue: AsyncTask vs Huey and procrastinate"
JSON_FILE = "sql.json"
MIB = 2**20
BACKEND_NAMES = {SQLITE: "SQLite", POSTGRESQL: "PostgreSQL"}


def _keys(results: SqlResults) -> list[tuple[str, int]]:
    """(backend, processes) in the order they ran."""
    return list(dict.fromkeys((r.backend, r.processes) for _, r in results.runs))


def _systems(results: SqlResults, backend: str) -> list[str]:
    """AsyncTask's rows first, then the peer."""
    names = dict.fromkeys(r.system for _, r in results.runs if r.backend == backend)
    return sorted(names, key=lambda name: not _ours(name))


def _ours(system: str) -> bool:
    return system.startswith("AsyncTask")


def _ok(results: SqlResults, backend: str, processes: int, system: str) -> list[SqlRun]:
    return [
        r
        for _, r in results.runs
        if r.backend == backend and r.processes == processes and r.system == system and not r.error
    ]


def throughput_table(results: SqlResults) -> list[str]:
    header = [
        "backend", "worker processes x job slots", "system", "**drain jobs/s steady**",
        "drain jobs/s incl. start-up", "start-up s", "enqueue jobs/s", *CPU_COLUMNS,
        "peak RSS (PSS) MiB, all workers", "load avg before",
    ]  # fmt: skip
    rows = []
    for backend, processes in _keys(results):
        for system in _systems(results, backend):
            head = [BACKEND_NAMES[backend], f"{processes} x {results.settings['concurrency']}", system]
            runs = _ok(results, backend, processes, system)
            if not runs:
                rows.append([*head, "failed", "", "", "", "", "", "", ""])
                continue
            postgres = per_job_us(runs, lambda r: r.postgres_steady_cpu_s) if backend == POSTGRESQL else "-"
            rss = statistics.median(r.peak_rss for r in runs) / MIB
            pss = statistics.median(r.peak_pss for r in runs) / MIB
            rows.append(
                [
                    *head,
                    f"**{spread((r.steady_rate for r in runs), rate)}**",
                    spread((r.total_rate for r in runs), rate),
                    spread((r.startup_s for r in runs), fixed(2)),
                    spread((r.enqueue_rate for r in runs), rate),
                    per_job_us(runs, lambda r: r.worker_steady.cpu),
                    postgres,
                    f"{rss:.0f} ({pss:.0f})",
                    spread((r.load_before for r in runs), fixed(2)),
                ]
            )
    return table(header, rows)


def cost_table(results: SqlResults) -> list[str]:
    """Where the workers' time goes per job: user vs kernel CPU, and how often threads switch."""
    rows = []
    for backend, processes in _keys(results):
        for system in _systems(results, backend):
            runs = _ok(results, backend, processes, system)
            if runs:
                rows.append([BACKEND_NAMES[backend], str(processes), system, *usage_cells(runs)])
    return table(["backend", "processes", "system", *USAGE_COLUMNS], rows)


def paired(
    results: SqlResults,
    pair: tuple[str, str],
    backend: str,
    processes: int,
    metric: Callable[[SqlRun], float],
) -> list[float]:
    """``pair[0]`` ÷ ``pair[1]`` of ``metric``, one value per repetition where both ran."""
    by_rep: dict[int, dict[str, SqlRun]] = {}
    for rep, r in results.runs:
        if r.backend == backend and r.processes == processes and not r.error:
            by_rep.setdefault(rep, {})[r.system] = r
    ours, peer = pair
    return [
        metric(runs[ours]) / metric(runs[peer])
        for runs in by_rep.values()
        if ours in runs and peer in runs and metric(runs[peer]) > 0
    ]


def _verdict(values: list[float]) -> str:
    if not values:
        return "-"
    if min(values) > 1:
        return "ahead"
    if max(values) < 1:
        return "**behind**"
    return "ahead" if statistics.median(values) > 1 else "**behind**"


def ratio_table(results: SqlResults) -> list[str]:
    lines = [
        "| backend | processes | ratio | drain jobs/s steady | drain jobs/s incl. start-up "
        "| worker CPU per job (lower is better) | target: ahead |",
        "|---|---|---|---|---|---|---|",
    ]
    found = False
    for backend, processes in _keys(results):
        names = _systems(results, backend)
        pairs = [(ours, peer) for ours in names if _ours(ours) for peer in names if not _ours(peer)]
        for pair in pairs:
            steady = paired(results, pair, backend, processes, lambda r: r.steady_rate)
            if not steady:
                continue
            found = True
            total = paired(results, pair, backend, processes, lambda r: r.total_rate)
            cpu = paired(results, pair, backend, processes, lambda r: r.worker_steady.cpu)
            lines.append(
                f"| {BACKEND_NAMES[backend]} | {processes} | {pair[0]} ÷ {pair[1]} "
                f"| **{spread(steady, ratio)}** | {spread(total, ratio)} | {spread(cpu, ratio)} "
                f"| {_verdict(steady) if pair[0] == 'AsyncTask' else 'n/a (tracking costs)'} |"
            )
    return lines if found else []


def tables(results: SqlResults) -> str:
    s = results.settings
    quick = " (--quick sizes: a smoke run, not figures to compare)" if s["quick"] else ""
    parts = [
        f"Drain of N = {s['jobs']:,} no-op jobs{quick}, enqueued before the workers start; "
        f"{s['reps']} rep(s), the systems of each backend and process count interleaved; "
        "median (min-max).",
        "",
        *throughput_table(results),
    ]
    parts += titled("Ratios, per repetition then median (min-max):", ratio_table(results))
    parts += [
        "",
        "Cost per job in the workers, steady phase (first -> last job done), median (min-max):",
        "",
        *cost_table(results),
    ]
    return section_text(parts, results)


METHOD = """\
- **Systems**: AsyncTask's SQL broker (`asynctask.brokers.sql`) on SQLite and on PostgreSQL,
  from the project's virtualenv; Huey's `SqliteHuey` (SQLite) and procrastinate
  (PostgreSQL) from `bench/.peers-venv`, a virtualenv the bench creates itself from
  `bench/peers/requirements.txt` (pinned; never project dependencies). Each system's job
  is a no-op that appends one byte to an O_APPEND marker file (one `write(2)`), opened
  once per worker process: the same completion signal for all, which costs the database
  nothing.
- **Durability**: AsyncTask's SQLite connections run WAL with `synchronous=NORMAL` (no
  fsync per commit; a power cut may lose the last commits, a crash of the process does
  not). Huey's default leaves SQLite's FULL (an fsync per commit), and its `fsync` option
  offers only FULL or OFF; so Huey runs twice: with its defaults, and with `synchronous=NORMAL`
  set on its connections, the same durability as AsyncTask. The *target: ahead* is to be read
  on the second. On PostgreSQL both systems commit under the same server settings (listed
  with the versions).
- **AsyncTask, tracked task** (full runs; not in `--quick`): the N jobs are one task's
  (`create_task`, chunk_size 1) and tracking is on, so each job's state change also writes
  its tracking rows, in the same transaction. The peers track nothing of the kind; this row
  shows what tracking costs, it is not part of the comparison.
- **Concurrency**: P worker processes (P = 1, 2), each with C job slots: AsyncTask `-c C`
  threads, Huey `-w C -k thread` threads, procrastinate `--concurrency C` asyncio tasks.
  Each system started the way its documentation says, per-job logging off where it is
  on by default (Huey `-q`, procrastinate `--log-level warning`), nothing else tuned.
- **Database per run**: SQLite: a new file in the bench's temporary directory, a copy of
  a file set up once per system (AsyncTask: `asynctask db upgrade`; Huey: `SqliteHuey`
  creating its tables) and checkpointed (WAL emptied into it). PostgreSQL: one private
  database per system (`bench_sql_<system>_<random>`, created for the run, dropped at
  the end; AsyncTask: `asynctask db upgrade`, procrastinate: `procrastinate schema
  --apply`), every table TRUNCATEd before each run. The bench sends the database nothing
  while workers run.
- **One run**: N jobs enqueued by the system's own client in a fresh process, in bulk
  where it has a bulk call (AsyncTask `perform_bulk`, procrastinate `batch_defer`, 1000
  per call; Huey has none: one INSERT per job); only the pushes are timed, then the
  pending count is checked to be N. Then the P workers are spawned together; the bench
  polls the marker's size every 2 ms. *steady* = first job done -> last job done,
  *incl. start-up* = first spawn -> last job done; rates are N divided by those.
- **Order**: for each repetition, SQLite then PostgreSQL, P = 1 then 2, AsyncTask and
  its peer one after the other, AsyncTask first in even repetitions and second in odd
  ones.
- **CPU**: user + system CPU of all worker process trees between first and last job done,
  ÷ N; on PostgreSQL also the CPU of the server backends serving the run's database (found
  by their process titles), same interval. SQLite runs inside the workers. Context
  switches are summed over all threads (`/proc/PID/task/*/status`).
- **Memory**: peak of the summed RSS of all worker trees, sampled every 100 ms; PSS in
  brackets.
- **Checks**: after TERM (all workers at once), the marker holds exactly N bytes (no job
  ran twice, none was lost) and the system's own table has no pending job (`checks` in
  the JSON).
"""


def markdown(results: SqlResults) -> str:
    lines = [f"## {SECTION}", "", tables(results), "### Method (SQL queue)", "", METHOD, "### Configuration"]
    for system, backends in results.configs.items():
        for backend, description in backends.items():
            lines += ["", f"#### {system} on {BACKEND_NAMES[backend]}", "", *(f"- {x}" for x in description)]
    versions = [f"- {name}: {value}" for name, value in results.versions.items()]
    return "\n".join([*lines, "", "#### Versions", "", *versions, ""])


def raw(results: SqlResults, machine: dict[str, str]) -> dict[str, Any]:
    return {
        "settings": results.settings,
        "machine": machine,
        "versions": results.versions,
        "databases": results.databases,
        "configs": results.configs,
        "seconds": results.seconds,
        "runs": [
            {
                "rep": rep,
                **asdict(r),
                "steady_rate": r.steady_rate,
                "total_rate": r.total_rate,
                "enqueue_rate": r.enqueue_rate,
            }
            for rep, r in results.runs
        ],
        "errors": results.errors(),
    }


def write(results: SqlResults, machine: dict[str, str], out_dir: Path) -> None:
    """``sql.json``, and this section added to (or replaced in) the RESULTS.md in ``out_dir``."""
    write_section(out_dir, SECTION, markdown(results), JSON_FILE, raw(results, machine))
