"""The periodic section of RESULTS.md and stdout, and ``periodic.json``.

Medians of the repetitions with (min-max); the scheduling CPU (scheduled - baseline) is taken
per repetition between the two runs of the same broker.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.core.document import drain_markdown, drain_raw, write_section
from bench.core.drain import POSTGRESQL, REDIS
from bench.core.fmt import drain_tables, fixed, judged, section_tail, spread, verdict
from bench.periodic.section import BASELINE, SAMPLE_EVERY, SCHEDULED, PeriodicResults, PeriodicRun

SECTION = "Periodic jobs"
JSON_FILE = "periodic.json"
BACKEND_NAMES = {REDIS: "Redis", POSTGRESQL: "PostgreSQL"}
#: Targets: the CPU scheduling costs each worker process, in % of one core, and the p99 of a
#: tick's lag to its job's enqueueing.
CPU_CEILING_PCT = 5.0
LAG_P99_MS = 100.0


def _ok(results: PeriodicResults, backend: str, case: str) -> dict[int, PeriodicRun]:
    return {rep: r for rep, r in results.runs if r.backend == backend and r.case == case and not r.error}


def scheduling_cpu(results: PeriodicResults, backend: str) -> list[float]:
    """Per repetition with both runs: the scheduled run's CPU per process - the baseline's, in %
    of a core."""
    scheduled, baseline = _ok(results, backend, SCHEDULED), _ok(results, backend, BASELINE)
    return [
        scheduled[rep].mean_cpu_pct() - baseline[rep].mean_cpu_pct() for rep in scheduled if rep in baseline
    ]


def ms(value: float) -> str:
    return f"{value:.1f}" if value < 10 else f"{value:,.0f}"


def _lags(runs: list[PeriodicRun], pick: Callable[[PeriodicRun], float]) -> str:
    return spread((pick(r) for r in runs), ms)


def cpu_table(results: PeriodicResults) -> list[str]:
    lines = [
        "| backend | schedules | worker processes x job slots | window s "
        "| worker CPU, baseline | worker CPU, scheduled | **scheduling CPU** | busiest process, scheduled "
        "| server CPU, baseline | server CPU, scheduled | first declarations s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    pct = fixed(1)
    for backend in (REDIS, POSTGRESQL):
        scheduled = list(_ok(results, backend, SCHEDULED).values())
        baseline = list(_ok(results, backend, BASELINE).values())
        if not scheduled and not baseline:
            continue
        first = (scheduled or baseline)[0]
        lines.append(
            f"| {BACKEND_NAMES[backend]} | {results.settings['schedules']:,} "
            f"| {first.processes} x {first.concurrency} | {first.seconds} "
            f"| {spread((r.mean_cpu_pct() for r in baseline), pct)} "
            f"| {spread((r.mean_cpu_pct() for r in scheduled), pct)} "
            f"| **{spread(scheduling_cpu(results, backend), pct)}** "
            f"| {spread((max(r.cpu_pct()) for r in scheduled), pct)} "
            f"| {spread((r.server_cpu_pct() for r in baseline), pct)} "
            f"| {spread((r.server_cpu_pct() for r in scheduled), pct)} "
            f"| {spread((r.ready_s for r in scheduled), fixed(1))} |"
        )
    return lines


def lag_table(results: PeriodicResults) -> list[str]:
    lines = [
        "| backend | jobs in the window (every tick once) | passes that pushed them "
        "| enqueued_at - tick p50 ms | p99 | max | in the queue - tick p50 ms | p99 | max "
        "| window end → last tick taken s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for backend in (REDIS, POSTGRESQL):
        runs = list(_ok(results, backend, SCHEDULED).values())
        if not runs:
            continue
        lines.append(
            f"| {BACKEND_NAMES[backend]} | {spread((r.jobs for r in runs), lambda v: f'{v:,.0f}')} "
            f"| {spread((r.pushes for r in runs), fixed(0))} "
            f"| {_lags(runs, lambda r: r.enqueued_lag.p50)} | {_lags(runs, lambda r: r.enqueued_lag.p99)} "
            f"| {_lags(runs, lambda r: r.enqueued_lag.max)} "
            f"| {_lags(runs, lambda r: r.visible_lag.p50)} | {_lags(runs, lambda r: r.visible_lag.p99)} "
            f"| {_lags(runs, lambda r: r.visible_lag.max)} | {spread((r.tail_s for r in runs), fixed(1))} |"
        )
    return lines


def target_rows(results: PeriodicResults) -> list[str]:
    rows = []
    schedules = results.settings["schedules"]
    for backend in (REDIS, POSTGRESQL):
        name = BACKEND_NAMES[backend]
        cpu = scheduling_cpu(results, backend)
        if cpu:
            rows.append(
                f"| {name}: scheduling CPU of {schedules:,} schedules every second, % of a core per worker "
                f"process (scheduled - baseline) | < {CPU_CEILING_PCT:.0f} % | {spread(cpu, fixed(1))} % "
                f"| {verdict(statistics.median(cpu) < CPU_CEILING_PCT)} |"
            )
        # Only the lag seen from outside is judged: ``enqueued_at`` is the tick's time by design.
        p99 = [r.visible_lag.p99 for r in _ok(results, backend, SCHEDULED).values()]
        if p99:
            met = statistics.median(p99) < LAG_P99_MS
            rows.append(
                f"| {name}: periodic job lag p99, in the queue - tick, seen from outside "
                f"| < {LAG_P99_MS:.0f} ms | {spread(p99, ms)} ms | {verdict(met)} |"
            )
    return judged(rows, results.settings["quick"])


def tables(results: PeriodicResults) -> str:
    s = results.settings
    quick = " (--quick sizes: a smoke run, not figures to compare)" if s["quick"] else ""
    intro = (
        f"{s['schedules']:,} schedules of a no-op job, every second, run by {s['processes']} worker "
        f"processes, against the same processes with no schedule{quick}; a window of {s['seconds']} s; "
        f"{s['reps']} rep(s); median (min-max). CPU in % of one core, per process."
    )
    tail = section_tail(results.databases, results.errors(), results.seconds)
    return drain_tables(intro, [*cpu_table(results), "", *lag_table(results)], target_rows(results), tail)


METHOD = f"""\
- **Schedules** (`bench/periodic/jobs.py`): `BENCH_PERIODIC_SCHEDULES` schedules
  `periodic(periodic_noop, cron="* * * * * *", name="every-second-<i>", queue="periodic")`, declared
  when the workers load the module; the baseline run loads it with none.
- **Workers**: `python -m asynctask worker --broker URL -r bench/periodic/jobs.py -c C -q default`,
  tracking off, spawned together from an empty broker; no worker serves the `periodic` queue, so the
  jobs pile up there and the workers' CPU is the scheduling's (and their idle fetching, which the
  baseline measures).
- **Window**: once every process logged its start (and, with schedules, recorded its first declaration,
  the *first declarations* column: spawn -> both recorded), the window is N whole seconds that start
  at most half a second before; its ticks are the N seconds that end it. The CPU (user + system of
  each worker process tree; of redis-server, or of the PostgreSQL backends serving the database) is
  read half a second after the window's start and half a second after its end, so that the passes of
  its ticks fall inside.
  *scheduling CPU* = the scheduled run's CPU per process - the baseline's, per repetition.
- **Checks**: after the window the bench waits until every schedule has taken the window's last tick,
  stops the workers, and reads the `periodic` queue straight from the store (Redis `LRANGE` of
  `queue:periodic`, SQL `SELECT id, payload FROM asynctask_job`): each (schedule, tick) of the window
  must be there exactly once (none missing, none doubled), or the run is an error.
- **Lag**: *in the queue - tick* is measured from outside: the queue's length (Redis) or its highest
  job id (SQL) is sampled every {SAMPLE_EVERY * 1000:.0f} ms, and a job's time is the first sample that
  holds it; this is the judged lag. `enqueued_at - periodic_at`, from each job's payload, only shows
  that no job was stamped before its tick: the scheduler builds the jobs ahead of the tick and stamps
  them with its time.
- **Order**: per broker and repetition, baseline then scheduled, reversed every other repetition.
"""


def markdown(results: PeriodicResults) -> str:
    return drain_markdown(SECTION, "periodic jobs", tables(results), METHOD, results.versions)


def raw(results: PeriodicResults, machine: dict[str, str]) -> dict[str, Any]:
    runs = [
        {"rep": rep, **asdict(r), "cpu_pct": r.cpu_pct(), "server_cpu_pct": r.server_cpu_pct()}
        for rep, r in results.runs
    ]
    cpu = {backend: scheduling_cpu(results, backend) for backend in results.settings["backends"]}
    return drain_raw(results, machine, runs, scheduling_cpu_pct=cpu)


def write(results: PeriodicResults, machine: dict[str, str], out_dir: Path) -> None:
    """``periodic.json``, and this section added to (or replaced in) the RESULTS.md in ``out_dir``."""
    write_section(out_dir, SECTION, markdown(results), JSON_FILE, raw(results, machine))
