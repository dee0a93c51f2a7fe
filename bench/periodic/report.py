"""The periodic section of RESULTS.md and stdout, and ``periodic.json``.

Medians of the repetitions with (min-max); the scheduling CPU (scheduled - baseline) is taken
per repetition between the two runs of the same broker.
"""

from __future__ import annotations

from collections.abc import Callable

from bench.core.fmt import fixed, spread, table
from bench.core.report import (
    BACKEND_NAMES,
    DrainReport,
    below,
    both_runs,
    case_runs,
    ok_by_rep,
    per_backend,
    per_rep,
)
from bench.periodic.section import BASELINE, SAMPLE_EVERY, SCHEDULED, Lag, PeriodicResults, PeriodicRun

#: Targets: the CPU scheduling costs each worker process, in % of one core, and the p99 of a
#: tick's lag to its job's enqueueing.
CPU_CEILING_PCT = 5.0
LAG_P99_MS = 100.0


def scheduling_cpu(results: PeriodicResults, backend: str) -> list[float]:
    """Per repetition with both runs: the scheduled run's CPU per process - the baseline's, in %
    of a core."""
    return per_rep(
        results, backend, SCHEDULED, BASELINE, lambda ours, base: ours.mean_cpu_pct() - base.mean_cpu_pct()
    )


def ms(value: float) -> str:
    return f"{value:.1f}" if value < 10 else f"{value:,.0f}"


def _lags(runs: list[PeriodicRun], pick: Callable[[PeriodicRun], Lag]) -> list[str]:
    """The p50, p99 and max cells of one of the runs' lags."""
    lags = [pick(r) for r in runs]
    return [
        spread((lag.p50 for lag in lags), ms),
        spread((lag.p99 for lag in lags), ms),
        spread((lag.max for lag in lags), ms),
    ]


def cpu_table(results: PeriodicResults) -> list[str]:
    header = [
        "backend", "schedules", "worker processes x job slots", "window s",
        "worker CPU, baseline", "worker CPU, scheduled", "**scheduling CPU**", "busiest process, scheduled",
        "server CPU, baseline", "server CPU, scheduled", "first declarations s",
    ]  # fmt: skip
    pct = fixed(1)
    rows = []
    for backend, scheduled, baseline in both_runs(results, SCHEDULED, BASELINE):
        first = (scheduled or baseline)[0]
        rows.append(
            [
                BACKEND_NAMES[backend],
                f"{results.settings['schedules']:,}",
                f"{first.processes} x {first.concurrency}",
                str(first.seconds),
                spread((r.mean_cpu_pct() for r in baseline), pct),
                spread((r.mean_cpu_pct() for r in scheduled), pct),
                f"**{spread(scheduling_cpu(results, backend), pct)}**",
                spread((max(r.cpu_pct()) for r in scheduled), pct),
                spread((r.server_cpu_pct() for r in baseline), pct),
                spread((r.server_cpu_pct() for r in scheduled), pct),
                spread((r.ready_s for r in scheduled), fixed(1)),
            ]
        )
    return table(header, rows)


def lag_table(results: PeriodicResults) -> list[str]:
    header = [
        "backend", "jobs in the window (every tick once)", "passes that pushed them",
        "enqueued_at - tick p50 ms", "p99", "max", "in the queue - tick p50 ms", "p99", "max",
        "window end → last tick taken s",
    ]  # fmt: skip
    return table(
        header,
        (
            [
                BACKEND_NAMES[backend],
                spread((r.jobs for r in runs), lambda v: f"{v:,.0f}"),
                spread((r.pushes for r in runs), fixed(0)),
                *_lags(runs, lambda r: r.enqueued_lag),
                *_lags(runs, lambda r: r.visible_lag),
                spread((r.tail_s for r in runs), fixed(1)),
            ]
            for backend, runs in case_runs(results, (SCHEDULED,))
        ),
    )


def _goals(results: PeriodicResults, backend: str) -> list[str]:
    schedules = results.settings["schedules"]
    name = BACKEND_NAMES[backend]
    # Only the lag seen from outside is judged: ``enqueued_at`` is the tick's time by design.
    p99 = [r.visible_lag.p99 for r in ok_by_rep(results, backend, SCHEDULED).values()]
    return [
        *below(
            f"{name}: scheduling CPU of {schedules:,} schedules every second, % of a core per worker "
            "process (scheduled - baseline)",
            CPU_CEILING_PCT,
            scheduling_cpu(results, backend),
            fixed(1),
            " %",
        ),
        *below(
            f"{name}: periodic job lag p99, in the queue - tick, seen from outside",
            LAG_P99_MS,
            p99,
            ms,
            " ms",
        ),
    ]


def _tables(results: PeriodicResults) -> list[str]:
    return [*cpu_table(results), "", *lag_table(results)]


INTRO = (
    "{schedules:,} schedules of a no-op job, every second, run by {processes} worker "
    "processes, against the same processes with no schedule{quick_sizes}; "
    "a window of {seconds} s; {reps} rep(s); median (min-max). "
    "CPU in % of one core, per process."
)


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


REPORT = DrainReport[PeriodicResults](
    "Periodic jobs",
    "periodic jobs",
    "periodic.json",
    METHOD,
    INTRO,
    _tables,
    per_backend(_goals),
    derived=lambda r: {"cpu_pct": r.cpu_pct(), "server_cpu_pct": r.server_cpu_pct()},
    extra=lambda results: {
        "scheduling_cpu_pct": {b: scheduling_cpu(results, b) for b in results.settings["backends"]}
    },
)
target_rows = REPORT.judged_rows
