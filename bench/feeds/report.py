"""The feeds section of RESULTS.md and stdout, and ``feeds.json``.

Medians of the repetitions with (min-max); the fed ÷ unfed ratio is taken per repetition
between the two drains of the same broker.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.core.document import drain_markdown, drain_raw, write_section
from bench.core.drain import POSTGRESQL, REDIS
from bench.core.fmt import drain_tables, fixed, judged, rate, ratio, section_tail, spread, verdict
from bench.feeds.section import FED, UNFED, FeedResults, FeedRun

SECTION = "Task feeds"
JSON_FILE = "feeds.json"
BACKEND_NAMES = {REDIS: "Redis", POSTGRESQL: "PostgreSQL"}
#: Targets: fed drain time ÷ unfed, the fed drain's rate with nearly all jobs held ÷ with
#: almost none, and the creating process's peak RSS for the large task ÷ the small one.
FEED_OVERHEAD = 1.15
HELD_SLOWDOWN = 0.85
MEMORY_GROWTH = 1.3


def _ok(results: FeedResults, backend: str, case: str) -> dict[int, FeedRun]:
    return {rep: r for rep, r in results.runs if r.backend == backend and r.case == case and not r.error}


def _per_rep(results: FeedResults, backend: str, value: Callable[[FeedRun, FeedRun], float]) -> list[float]:
    fed, unfed = _ok(results, backend, FED), _ok(results, backend, UNFED)
    return [value(fed[rep], unfed[rep]) for rep in fed if rep in unfed]


def throughput_table(results: FeedResults) -> list[str]:
    lines = [
        "| backend | case | items | parallel | worker processes x job slots | create s | create peak RSS MiB "
        "| **drain jobs/s steady** | first ÷ last tenth jobs/s | worker CPU µs/job | PostgreSQL CPU µs/job |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for backend in (REDIS, POSTGRESQL):
        for case in (UNFED, FED):
            runs = list(_ok(results, backend, case).values())
            if not runs:
                continue
            first = runs[0]
            postgres = spread((r.postgres_cpu_s / r.jobs * 1e6 for r in runs), fixed(0))
            tenths = (
                r.tenth_rate(False) / r.tenth_rate(True)
                for r in runs
                if min(r.tenth_rate(False), r.tenth_rate(True)) > 0
            )
            lines.append(
                f"| {BACKEND_NAMES[backend]} | {case} | {first.jobs:,} | {first.parallel or '-'} "
                f"| {first.processes} x {first.concurrency} | {spread((r.create_s for r in runs), fixed(1))} "
                f"| {spread((r.create_peak_rss_kb / 1024 for r in runs), fixed(0))} "
                f"| **{spread((r.steady_rate for r in runs), rate)}** | {spread(tenths, ratio)} "
                f"| {spread((r.worker_cpu_s / r.jobs * 1e6 for r in runs), fixed(0))} "
                f"| {postgres if backend == POSTGRESQL else '-'} |"
            )
    return lines


def target_rows(results: FeedResults) -> list[str]:
    rows = []
    parallel = results.settings["parallel"]
    for backend in (REDIS, POSTGRESQL):
        name = BACKEND_NAMES[backend]
        overhead = _per_rep(results, backend, lambda fed, unfed: fed.steady_s / unfed.steady_s)
        if overhead:
            rows.append(
                f"| {name}: drain time fed at parallel={parallel} ÷ unfed | ≤ {FEED_OVERHEAD:.2f}x "
                f"| {spread(overhead, ratio)} | {verdict(statistics.median(overhead) <= FEED_OVERHEAD)} |"
            )
        fed = [
            r for r in _ok(results, backend, FED).values() if min(r.tenth_rate(False), r.tenth_rate(True)) > 0
        ]
        held = [r.tenth_rate(False) / r.tenth_rate(True) for r in fed]
        if held:
            rows.append(
                f"| {name}: fed drain jobs/s, first tenth (nearly all held) ÷ last tenth | "
                f"≥ {HELD_SLOWDOWN:.2f}x | {spread(held, ratio)} "
                f"| {verdict(statistics.median(held) >= HELD_SLOWDOWN)} |"
            )
        small = results.small_peak_rss_kb.get(backend)
        large = [r.create_peak_rss_kb for r in fed]
        if small and large:
            growth = [peak / small for peak in large]
            rows.append(
                f"| {name}: peak RSS creating {fed[0].jobs:,} items ÷ creating 10,000 "
                f"| ≤ {MEMORY_GROWTH:.1f}x "
                f"| {spread(growth, ratio)} | {verdict(statistics.median(growth) <= MEMORY_GROWTH)} |"
            )
    return judged(rows, results.settings["quick"])


def tables(results: FeedResults) -> str:
    s = results.settings
    quick = " (--quick sizes: a smoke run, not figures to compare)" if s["quick"] else ""
    intro = (
        f"One task of no-op chunk jobs per drain{quick}, created before the workers start; {s['reps']} "
        "rep(s), unfed and fed interleaved; median (min-max)."
    )
    tail = section_tail(results.databases, results.errors(), results.seconds)
    return drain_tables(intro, throughput_table(results), target_rows(results), tail)


METHOD = """\
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
- **CPU**: user + system CPU of all worker process trees and of the PostgreSQL backends
  serving the database, first -> last job done, ÷ N.
"""


def markdown(results: FeedResults) -> str:
    return drain_markdown(SECTION, "task feeds", tables(results), METHOD, results.versions)


def raw(results: FeedResults, machine: dict[str, str]) -> dict[str, Any]:
    runs = [{"rep": rep, **asdict(r), "steady_rate": r.steady_rate} for rep, r in results.runs]
    return drain_raw(results, machine, runs, small_peak_rss_kb=results.small_peak_rss_kb)


def write(results: FeedResults, machine: dict[str, str], out_dir: Path) -> None:
    """``feeds.json``, and this section added to (or replaced in) the RESULTS.md in ``out_dir``."""
    write_section(out_dir, SECTION, markdown(results), JSON_FILE, raw(results, machine))
