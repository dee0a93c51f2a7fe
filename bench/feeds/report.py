"""The feeds section of RESULTS.md and stdout, and ``feeds.json``.

Medians of the repetitions with (min-max); the fed ÷ unfed ratio is taken per repetition
between the two drains of the same broker.
"""

from __future__ import annotations

from bench.core.fmt import fixed, spread, table
from bench.core.report import (
    BACKEND_NAMES,
    CPU_METHOD,
    STEADY_COLUMNS,
    DrainReport,
    at_least,
    at_most,
    case_runs,
    ok_by_rep,
    per_backend,
    per_rep,
    steady_cells,
)
from bench.feeds.section import FED, UNFED, FeedResults

#: Targets: fed drain time ÷ unfed, the fed drain's rate with nearly all jobs held ÷ with
#: almost none, and the creating process's peak RSS for the large task ÷ the small one.
FEED_OVERHEAD = 1.15
HELD_SLOWDOWN = 0.85
MEMORY_GROWTH = 1.3


def throughput_table(results: FeedResults) -> list[str]:
    header = [
        "backend", "case", "items", "parallel", "worker processes x job slots", "create s",
        "create peak RSS MiB", *STEADY_COLUMNS,
    ]  # fmt: skip
    rows = []
    for backend, runs in case_runs(results, (UNFED, FED)):
        first = runs[0]
        rows.append(
            [
                BACKEND_NAMES[backend],
                first.case,
                f"{first.jobs:,}",
                f"{first.parallel or '-'}",
                f"{first.processes} x {first.concurrency}",
                spread((r.create_s for r in runs), fixed(1)),
                spread((r.create_peak_rss_kb / 1024 for r in runs), fixed(0)),
                *steady_cells(backend, runs),
            ]
        )
    return table(header, rows)


def _goals(results: FeedResults, backend: str) -> list[str]:
    parallel = results.settings["parallel"]
    name = BACKEND_NAMES[backend]
    rows: list[str] = []
    overhead = per_rep(results, backend, FED, UNFED, lambda fed, unfed: fed.steady_s / unfed.steady_s)
    rows += at_most(f"{name}: drain time fed at parallel={parallel} ÷ unfed", FEED_OVERHEAD, overhead)
    fed = [
        r
        for r in ok_by_rep(results, backend, FED).values()
        if min(r.tenth_rate(False), r.tenth_rate(True)) > 0
    ]
    held = [r.tenth_rate(False) / r.tenth_rate(True) for r in fed]
    rows += at_least(
        f"{name}: fed drain jobs/s, first tenth (nearly all held) ÷ last tenth", HELD_SLOWDOWN, held
    )
    small = results.small_peak_rss_kb.get(backend)
    large = [r.create_peak_rss_kb for r in fed]
    if small and large:
        rows += at_most(
            f"{name}: peak RSS creating {fed[0].jobs:,} items ÷ creating 10,000",
            MEMORY_GROWTH,
            [peak / small for peak in large],
            digits=1,
        )
    return rows


INTRO = (
    "One task of no-op chunk jobs per drain{quick_sizes}, created before the workers start; "
    "{reps} rep(s), unfed and fed interleaved; median (min-max)."
)


METHOD = (
    """\
- **Job** (`bench/feeds/jobs.py`): the no-op of the other sections (one byte appended to an
  O_APPEND marker file), taking the task's chunk (one item) as its argument.
- **Creation**: `create_task(FeedNoopJob, range(N))` (items streamed from a generator, chunks
  of one), with `parallel=P` for the fed case, in a process of its own
  (`python -m bench.feeds.create`), which reports its time and peak RSS (`ru_maxrss`). The
  tracking database is the section's private PostgreSQL database on both brokers. Before the
  drains, each broker also creates a 10,000-item fed task the same way, for the RSS compared.
- **Drain**: the worker processes (`python -m asynctask worker --broker URL -r
  bench/feeds/jobs.py -c C -q default`, tracking off) are spawned together after the creation
  and the marker's size is polled every 2 ms. *steady* = first job done -> last job done.
  Afterwards the marker holds exactly N bytes and the queue is empty.
- **Held jobs**: the marker's size is sampled every 0.1 s; the rate over the first tenth of the
  jobs (N to 0.9 N held) ÷ the rate over the last tenth (0.1 N to none held) shows whether
  a release costs more with more jobs held.
"""
    + CPU_METHOD
)


REPORT = DrainReport[FeedResults](
    "Task feeds",
    "task feeds",
    "feeds.json",
    METHOD,
    INTRO,
    throughput_table,
    per_backend(_goals),
    derived=lambda r: {"steady_rate": r.steady_rate},
    extra=lambda results: {"small_peak_rss_kb": results.small_peak_rss_kb},
)
target_rows = REPORT.judged_rows
