"""The flow section of RESULTS.md and stdout, and ``flow.json``.

As in the other sections: medians of the repetitions with (min-max); ratios are taken per
repetition between the two runs they compare, then summarised.
"""

from __future__ import annotations

from collections.abc import Callable

from bench.core.drain import POSTGRESQL, REDIS
from bench.core.fmt import fixed, rate, spread, table
from bench.core.report import (
    BACKEND_NAMES,
    CPU_COLUMNS,
    CPU_METHOD,
    DrainReport,
    at_least,
    at_most,
    cpu_cells,
    verdict_row,
)
from bench.flow.section import BACKLOG, HOT, KEYED, PLAIN, FlowResults, FlowRun

#: Targets: keyed drain ÷ plain drain, the hot key's serial rate, large ÷ small backlog rate.
KEYED_SHARE = 0.70
HOT_RATE = 1000.0
BACKLOG_SLOWDOWN = 2.0


def _ok(results: FlowResults, backend: str, label: str) -> list[tuple[int, FlowRun]]:
    return [(rep, r) for rep, r in results.runs if r.backend == backend and r.label == label and not r.error]


def _labels(results: FlowResults) -> list[tuple[str, str]]:
    """(backend, label) in the order they ran."""
    return list(dict.fromkeys((r.backend, r.label) for _, r in results.runs))


def paired(
    results: FlowResults, backend: str, ours: str, base: str, metric: Callable[[FlowRun], float]
) -> list[float]:
    """``ours`` ÷ ``base`` of ``metric``, one value per repetition where both ran."""
    mine = dict(_ok(results, backend, ours))
    theirs = dict(_ok(results, backend, base))
    return [
        metric(mine[rep]) / metric(theirs[rep]) for rep in mine if rep in theirs and metric(theirs[rep]) > 0
    ]


def _backlog_labels(results: FlowResults) -> tuple[str, str] | None:
    sizes = sorted({r.waiting for _, r in results.runs if r.case == BACKLOG})
    if len(sizes) < 2:
        return None
    return f"{BACKLOG} of {sizes[0]:,} waiting", f"{BACKLOG} of {sizes[-1]:,} waiting"


def throughput_table(results: FlowResults) -> list[str]:
    header = [
        "backend", "case", "jobs", "keys", "worker processes x job slots", "**drain jobs/s steady**",
        "push jobs/s", *CPU_COLUMNS, "load avg before",
    ]  # fmt: skip
    rows = []
    for backend, label in _labels(results):
        runs = [r for _, r in _ok(results, backend, label)]
        if not runs:
            rows.append([BACKEND_NAMES[backend], label, "", "", "", "failed", "", "", "", ""])
            continue
        first = runs[0]
        rows.append(
            [
                BACKEND_NAMES[backend],
                label,
                f"{first.jobs:,}",
                f"{first.keys:,}",
                f"{first.processes} x {first.concurrency}",
                f"**{spread((r.steady_rate for r in runs), rate)}**",
                spread((r.jobs / r.push_s for r in runs if r.push_s > 0), rate),
                *cpu_cells(backend, runs),
                spread((r.load_before for r in runs), fixed(2)),
            ]
        )
    return table(header, rows)


def _goals(results: FlowResults) -> list[str]:
    """The flow goals' rows (also shown in the Targets section)."""
    rows = []
    keys = results.settings["keys"]
    for backend in (REDIS, POSTGRESQL):
        shares = paired(results, backend, KEYED, PLAIN, lambda r: r.steady_rate)
        rows += at_least(
            f"{BACKEND_NAMES[backend]}: {keys:,} distinct keys at limit 1 ÷ no key, drain jobs/s",
            KEYED_SHARE,
            shares,
        )
    hot = [r.steady_rate for _, r in _ok(results, REDIS, HOT)]
    rows += verdict_row(
        "Redis: one hot key at limit 1, serial jobs/s",
        f"≥ {HOT_RATE:,.0f}",
        hot,
        rate,
        lambda median: median >= HOT_RATE,
    )
    backlog = _backlog_labels(results)
    if backlog is not None:
        small, large = backlog
        slowdown = paired(results, POSTGRESQL, small, large, lambda r: r.steady_rate)
        sizes = [r.waiting for _, r in results.runs if r.case == BACKLOG]
        rows += at_most(
            f"PostgreSQL, 4 processes: drain jobs/s with {min(sizes):,} ÷ with {max(sizes):,} "
            "keyed jobs waiting",
            BACKLOG_SLOWDOWN,
            slowdown,
            digits=1,
        )
    return rows


INTRO = (
    "No-op drains{quick_sizes}, pushed before the workers start; {reps} rep(s), the runs of each "
    "comparison interleaved; median (min-max)."
)


METHOD = (
    """\
- **Jobs** (`bench/flow/jobs.py`): the no-op of the other sections (one byte appended to
  an O_APPEND marker file), as `FlowPlainJob(key)` without flow options and `FlowKeyedJob(key)`
  with `concurrency_key="{key}"` (limit 1): the same arguments and work, only the key differs.
- **One run**: an empty broker (Redis: FLUSHALL of the bench's private server; PostgreSQL:
  every table of the section's private database TRUNCATEd); N jobs pushed with
  `perform_bulk(batch_size=1000)` from the bench process (timed: *push jobs/s*); then the
  worker processes (`python -m asynctask worker --broker URL -r bench/flow/jobs.py -c C -q
  default`, tracking off) are spawned together and the marker's size is polled every 2 ms.
  *steady* = first job done -> last job done; the rate is N divided by it. Afterwards: the
  marker holds exactly N bytes, the queue is empty.
- **Distinct keys vs no key** (Redis, PostgreSQL; 1 process x 10 slots): job i gets key
  `k{i mod K}`, so the queue starts with K runnable jobs and each key's next job is promoted
  when the previous one ends. The plain and keyed drains of a repetition run one after the
  other, plain first in even repetitions; the ratio is taken per repetition.
- **One hot key** (Redis): every job has the same key: one job runs at a time whatever the
  slots, each ack promoting the next in the same script call.
- **Backlog** (PostgreSQL; 4 processes x 10 slots): before the push, W `FlowParkedJob`s are
  pushed over 1,000 keys to a queue no worker reads; each key's first job holds its slot
  there, so the other W wait in their keys' lines for the whole run (checked after it).
  Then the keyed drain as above. Small and large W alternate; the ratio is small ÷ large.
  The plans below are `EXPLAIN (ANALYZE, BUFFERS, TIMING OFF)` of the broker's own claim
  statement (10 jobs of `default`, nothing acknowledged) and of its promotion statement for a
  parked key, with the large backlog and the N jobs queued, in a transaction rolled back.
"""
    + CPU_METHOD
)


def _plans(results: FlowResults) -> list[str]:
    plans: list[str] = []
    for name, plan in results.plans.items():
        plans += [f"#### Plan: {name}", "", "```", plan, "```", ""]
    return plans


REPORT = DrainReport[FlowResults](
    "Flow control: concurrency keys",
    "flow control",
    "flow.json",
    METHOD,
    INTRO,
    throughput_table,
    _goals,
    derived=lambda r: {"steady_rate": r.steady_rate},
    extra=lambda results: {"plans": results.plans},
    notes=_plans,
)
target_rows = REPORT.judged_rows
