"""The tracking section of RESULTS.md and stdout, ``tracking.json`` and ``tracking_plans.txt``.

As in the runtime section: medians of the repetitions with (min-max), ratios taken per
repetition between interleaved runs and then summarised.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.core import document
from bench.core.fmt import fixed, rate, ratio, section_text, spread, table
from bench.tracking.drain import DrainRun
from bench.tracking.section import TrackingResults

#: Tracking's targets: cost of tracking to a drain, create_task and get_task times.
TARGET_RATIO = 0.70
TARGET_CREATE_S = {"postgresql": 3.0, "sqlite": 5.0}
TARGET_CREATE_ITEMS = 100_000
TARGET_P99_MS = 10.0
TARGET_EVENTS = 1_000_000
TITLE = "Task tracking"
JSON_FILE = "tracking.json"
PLANS_FILE = "tracking_plans.txt"


def _verdict(met: bool, applies: bool = True) -> str:
    if not applies:
        return "n/a at this size"
    return "met" if met else "**missed**"


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def drain_table(results: TrackingResults) -> list[str]:
    modes = list(dict.fromkeys(run.mode for _, run in results.drains))
    lines = [
        "| mode | enqueue s (jobs/s) | **executed jobs/s** (first → last job) | ÷ untracked "
        "| SQL caught up, s after last job | jobs/s until SQL caught up | ÷ untracked "
        "| stream entries left at last job | worker CPU µs/job (executed; until caught up) "
        "| start-up s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for mode in modes:
        runs = [r for _, r in results.drains if r.mode == mode and not r.error]
        if not runs:
            lines.append(f"| {mode} | failed | | | | | | | | |")
            continue
        enqueue_rate = rate(_median([r.jobs / r.enqueue_s for r in runs]))
        enqueue = f"{spread((r.enqueue_s for r in runs), fixed(2))} ({enqueue_rate})"
        executed = spread((r.steady_rate for r in runs), rate)
        cpu = f"{_median([r.cpu_steady_s / r.jobs * 1e6 for r in runs]):.0f}"
        if runs[0].tracked:
            cpu += f"; {_median([r.cpu_caught_up_s / r.jobs * 1e6 for r in runs]):.0f}"
            lag = spread((r.caught_up_s for r in runs), fixed(2))
            caught = spread((r.caught_up_rate for r in runs), rate)
            backlog = spread((r.backlog_entries for r in runs), fixed(0))
            executed_ratio = spread(paired(results, mode, lambda r: r.steady_rate), ratio)
            caught_ratio = spread(paired(results, mode, lambda r: r.caught_up_rate), ratio)
        else:
            lag = caught = backlog = executed_ratio = caught_ratio = "-"
        lines.append(
            f"| {mode} | {enqueue} | **{executed}** | {executed_ratio} | {lag} | {caught} | {caught_ratio} "
            f"| {backlog} | {cpu} | {spread((r.startup_s for r in runs), fixed(2))} |"
        )
    return lines


def paired(results: TrackingResults, mode: str, metric: Callable[[DrainRun], float]) -> list[float]:
    """``mode`` ÷ untracked of ``metric``, one value per repetition where both ran."""
    by_rep: dict[int, dict[str, DrainRun]] = {}
    for rep, run in results.drains:
        if not run.error:
            by_rep.setdefault(rep, {})[run.mode] = run
    pairs = [(r[mode], r["untracked"]) for r in by_rep.values() if {mode, "untracked"} <= r.keys()]
    return [metric(a) / metric(b) for a, b in pairs if metric(b) > 0]


def drain_targets(results: TrackingResults) -> list[str]:
    # With --quick's few jobs the flusher does most of its work after the last job, so the
    # executed ratio flatters tracking: the verdicts are for the full run only.
    applies = not results.settings["quick"]
    lines = []
    for mode in dict.fromkeys(r.mode for _, r in results.drains if r.tracked):
        executed = paired(results, mode, lambda r: r.steady_rate)
        caught = paired(results, mode, lambda r: r.caught_up_rate)
        if not executed:
            continue
        lines.append(
            f"- {mode}: tracked ÷ untracked, executed {_median(executed):.2f}x "
            f"(target ≥ {TARGET_RATIO:.2f}: {_verdict(_median(executed) >= TARGET_RATIO, applies)}); "
            f"counting until SQL caught up {_median(caught):.2f}x "
            f"({_verdict(_median(caught) >= TARGET_RATIO, applies)})"
        )
    return lines


def create_table(results: TrackingResults) -> list[str]:
    header = [
        "database",
        "items",
        "**create_task s**",
        "items/s",
        "prepare s",
        "SQL s",
        "push s",
        "finish s",
        "target",
    ]
    rows = []
    for database in dict.fromkeys(r.database for _, r in results.creates):
        runs = [r for _, r in results.creates if r.database == database and not r.error]
        if not runs:
            rows.append([database, "", "failed", "", "", "", "", "", ""])
            continue
        total = _median([r.total_s for r in runs])
        limit = TARGET_CREATE_S[database]
        items = runs[0].items
        rows.append(
            [
                database,
                f"{items:,}",
                f"**{spread((r.total_s for r in runs), fixed(2))}**",
                spread((r.rate for r in runs), rate),
                spread((r.prepare_s for r in runs), fixed(2)),
                spread((r.sql_s for r in runs), fixed(2)),
                spread((r.push_s for r in runs), fixed(2)),
                spread((r.finish_s for r in runs), fixed(3)),
                f"< {limit:.0f} s: {_verdict(total < limit, items == TARGET_CREATE_ITEMS)}",
            ]
        )
    return table(header, rows)


def read_table(results: TrackingResults) -> list[str]:
    big = results.big_task
    if big is None:
        return []
    header = [
        "threads", "calls", "p50 ms", "p90 ms", "**p99 ms**", "max ms", "mean ms", "calls/s",
        "bench-process CPU ms/call", "target p99 < 10 ms",
    ]  # fmt: skip
    return table(
        header,
        (
            [
                str(lat.threads),
                str(lat.calls),
                f"{lat.p50_ms:.2f}",
                f"{lat.p90_ms:.2f}",
                f"**{lat.p99_ms:.2f}**",
                f"{lat.max_ms:.2f}",
                f"{lat.mean_ms:.2f}",
                rate(lat.rate),
                f"{lat.client_cpu_ms:.2f}",
                _verdict(lat.p99_ms < TARGET_P99_MS, big.events >= TARGET_EVENTS),
            ]
            for lat in results.latencies
        ),
    )


def plan_summary(results: TrackingResults) -> list[str]:
    if not results.plans:
        return []
    full = [scan for plan in results.plans for scan in plan.full_scans]
    lines = [
        f"get_task ran {len(results.plans)} statements; scan nodes of their plans (custom plan with "
        f"the real parameters, then the generic plan of a prepared statement; full text in `{PLANS_FILE}`):",
        "",
    ]
    for k, plan in enumerate(results.plans, 1):
        lines.append(f"{k}. `{short_statement(plan.statement)}`: " + "; ".join(plan.scans))
    lines.append("")
    if full:
        lines.append("**Full scans of an event table were found:** " + "; ".join(full))
    else:
        lines.append(
            "No statement scans the events table: no plan (custom or generic) reads `asynctask_event` "
            "or `asynctask_event_message` with a Seq Scan; every access is an index range scan "
            "(checked from the EXPLAIN JSON by the bench)."
        )
    return lines


def short_statement(statement: str) -> str:
    """``SELECT … FROM t WHERE c = ? …``: the shape of a statement, without its column list."""
    flat = " ".join(statement.split())
    _, _, rest = flat.partition(" FROM ")
    rest = re.sub(r"\b\w+\.(?=\w)", "", rest)  # table. prefixes
    rest = re.sub(r"%\(\w+\)s(::\w+)?", "?", rest)  # bound parameters
    return f"SELECT … FROM {rest}" if rest else flat


def tables(results: TrackingResults) -> str:
    s = results.settings
    big = results.big_task
    quick = " (--quick sizes: smoke run; targets apply to the full sizes)" if s["quick"] else ""
    parts = [
        f"Tracking on vs off{quick}: N = {s['tracking_jobs']} no-op jobs, one worker process "
        f"x {s['tracking_concurrency']} threads, {s['tracking_reps']} rep(s) interleaved; median (min-max).",
        "",
        *drain_table(results),
        "",
        *drain_targets(results),
        "",
        f"create_task of {s['create_items']:,} items, chunk_size=1 (one job each), into empty tables, "
        f"{s['create_reps']} rep(s); median (min-max){quick}:",
        "",
        *create_table(results),
    ]
    if big is not None:
        counts = ", ".join(f"{k} {v:,}" for k, v in big.counts.items() if v)
        size = f"{big.events:,} events" + (
            " (--quick size, not the 1,000,000 of the target)" if s["quick"] else ""
        )
        parts += [
            "",
            f"get_task on PostgreSQL, one task of {size} ({counts}), {big.messages:,} messages, "
            f"plus {big.small_tasks:,} small tasks; built in SQL in {big.build_s:.1f} s, "
            "then VACUUM ANALYZE:",
            "",
            *read_table(results),
            "",
            *plan_summary(results),
        ]
    return section_text(parts, results)


METHOD = """\
- **Drain, tracking on vs off**: the same job (`bench/core/tracked_jobs.py`: a no-op taking one
  list argument, plus the one-byte marker write) and the same worker command,
  `python -m asynctask worker -r bench/core/tracked_jobs.py -c C -q default`, in three modes run
  back to back in every repetition: *untracked* (`ASYNCTASK_TRACKING=false`, jobs queued by
  `Client.push_bulk` with args `[[i]]`), and *tracked* on PostgreSQL or SQLite
  (`ASYNCTASK_TRACKING=true`, `ASYNCTASK_DATABASE_URL` set, the same N jobs created by
  `Tracking.create_task(job, range(N), chunk_size=1)`, so the args are `[[i]]` again).
  The jobs are queued before the worker starts; *enqueue* is that step alone.
  *Executed* = first job done -> last job done (marker file polled every 2 ms, as in the
  runtime section). *SQL caught up* = last job done -> the first `get_task` (polled every
  5 ms, only once every job is done) that reports the task `finished`: the flusher's lag.
  *jobs/s until SQL caught up* = N / (first job done -> caught up). *stream entries left* =
  XLEN of the tracking stream at the last job (entries hold many transitions each).
  Checks after each run: every job ran once, queue and in-flight lists empty, and SQL says
  N jobs `finish`.
- **create_task**: `Tracking.create_task(job, range(M), chunk_size=1)` into empty tables
  (PostgreSQL: TRUNCATE; SQLite: a new file), timed with `perf_counter` after a GC, the
  SQL connection already open. The split comes from two timers attached from outside (a
  SQLAlchemy `begin` listener and a wrapper around the client's `broker.push`):
  *prepare* = call -> BEGIN (payloads, client middleware), *SQL* = BEGIN -> push (INSERTs
  of the task and all events, COMMIT), *push* = the one MULTI/EXEC of all jobs (JSON
  encoding included), *finish* = the state update to ready and the final get_task.
- **get_task**: the big task is built by INSERT ... SELECT generate_series
  (`bench/tracking/data.py`), then `Tracking.get_task(id)` is called from 1 and from 8
  threads of the bench process, each thread on its own pooled connection (pool size
  threads + 2), after 20 warm-up calls per thread; every call is timed. The library's
  engine settings are kept (`pool_pre_ping`). The 8-thread figures share the bench
  process's GIL and the machine's 2 cores with PostgreSQL.
- PostgreSQL: a database `asynctask_bench_<random>` created for the run (tables from the
  models) and dropped at exit; SQLite: files in the bench's temporary directory.
"""


def raw(results: TrackingResults, machine: dict[str, str]) -> dict[str, Any]:
    return document.section_raw(
        results,
        machine,
        drain=[
            {"rep": rep, **asdict(r), "steady_rate": r.steady_rate, "caught_up_rate": r.caught_up_rate}
            for rep, r in results.drains
        ],
        create_task=[{"rep": rep, **asdict(r), "rate": r.rate} for rep, r in results.creates],
        big_task=asdict(results.big_task) if results.big_task else None,
        get_task=[{**asdict(lat), "rate": lat.rate} for lat in results.latencies],
        plans=[asdict(plan) for plan in results.plans],
    )


def plans_text(results: TrackingResults) -> str:
    chunks = []
    for k, plan in enumerate(results.plans, 1):
        chunks += [
            f"=== statement {k}",
            plan.statement.strip(),
            f"parameters: {plan.parameters}",
            "",
            "--- custom plan: EXPLAIN (ANALYZE, BUFFERS) with these parameters",
            plan.custom,
            "",
            "--- generic plan: PREPARE; SET plan_cache_mode = force_generic_plan; "
            "EXPLAIN (ANALYZE, BUFFERS) EXECUTE",
            plan.generic,
            "",
        ]
    return "\n".join(chunks)


def markdown(results: TrackingResults) -> str:
    return "\n".join([f"## {TITLE}", "", tables(results), "### Method (tracking)", "", METHOD])


def write(results: TrackingResults, machine: dict[str, str], out_dir: Path) -> None:
    """``tracking.json``, the plans of get_task's statements, and the section added to RESULTS.md."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if results.plans:
        (out_dir / PLANS_FILE).write_text(plans_text(results), encoding="utf-8")
    document.write_section(
        out_dir, TITLE, markdown(results), JSON_FILE, raw(results, machine), also=(PLANS_FILE,)
    )
