"""AsyncTask's performance targets, judged on this run's own data: a "Targets" section at the
top of RESULTS.md.

A target whose data did not come from this run says so instead of borrowing an older figure.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from bench.ceiling import section as ceiling
from bench.core import document
from bench.core.fmt import fixed, ratio, spread
from bench.core.sections import CEILING, LATENCY, TRACKING, Run
from bench.runtime import report
from bench.tracking import report as tracking_report

TITLE = "Targets"
#: Tracking may cost at most this share of the untracked drain throughput.
TRACKING_COST = 0.30
LATENCY_P99_MS = 5.0
PYTHON_PEER_RATIO = 1.5
BULLMQ_RATIO = 2.0


def _verdict(met: bool) -> str:
    return "**met**" if met else "**missed**"


def runtime_rows(results: report.Results) -> list[str]:
    rows: list[str] = []
    for config in results.configurations():
        label = f"{config[0]} proc x {config[1]}"
        for other, floor in (
            ("Sidekiq", 1.0),
            ("BullMQ", BULLMQ_RATIO),
            (report.FASTEST_PYTHON, PYTHON_PEER_RATIO),
        ):
            ratios = report.paired(results, config, other, lambda r: r.steady_rate)
            if not ratios:
                continue
            met = statistics.median(ratios) >= floor
            rows.append(
                f"| AsyncTask (Redis) ÷ {other}, no-op drain jobs/s, {label} | ≥ {floor:.1f}x "
                f"| {spread(ratios, ratio)} | {_verdict(met)} |"
            )
    return rows


def tracking_rows(run: Run) -> list[str]:
    tracking = run.results(TRACKING)
    if tracking is None:
        return []
    rows = []
    for mode in dict.fromkeys(r.mode for _, r in tracking.drains if r.tracked):
        for what, metric in (
            ("jobs executed", lambda r: r.steady_rate),
            ("until SQL shows every job done", lambda r: r.caught_up_rate),
        ):
            ratios = tracking_report.paired(tracking, mode, metric)
            if not ratios:
                continue
            cost = [1 - r for r in ratios]
            # --quick's few jobs end before the flusher gets going: no verdict on them.
            verdict = (
                "not judged (--quick)"
                if tracking.settings["quick"]
                else _verdict(statistics.median(cost) <= TRACKING_COST)
            )
            rows.append(
                f"| tracking cost on the Redis broker, {mode} database, {what} (1 - tracked ÷ untracked) "
                f"| ≤ {TRACKING_COST:.0%} | {spread((c * 100 for c in cost), fixed(0))} % | {verdict} |"
            )
    return rows


def latency_rows(run: Run) -> list[str]:
    ours = [r for r in run.results(LATENCY) or [] if r.system == "AsyncTask" and not r.error]
    if not ours:
        return []
    p99 = [r.percentile(99) for r in ours]
    rate = run.settings["latency"]["rate"]
    met = statistics.median(p99) < LATENCY_P99_MS
    return [
        f"| AsyncTask (Redis) enqueue → start p99 at {rate:,.0f} jobs/s | < {LATENCY_P99_MS:.0f} ms "
        f"| {spread(p99, fixed(2))} ms | {_verdict(met)} |"
    ]


def ceiling_lines(run: Run) -> list[str]:
    measured = run.results(CEILING)
    if measured is None or not run.runtime.process:
        return []
    drains = run.runtime.runs("AsyncTask", (1, 10))
    if not drains:
        return []
    drain = statistics.median(r.steady_rate for r in drains)
    return ["", *ceiling.share_lines(measured, drain, "AsyncTask, 1 worker process x 10 slots")]


def markdown(run: Run) -> str:
    rows = runtime_rows(run.runtime) + tracking_rows(run) + latency_rows(run) + run.judged_rows()
    lines = [
        f"## {TITLE}",
        "",
        "AsyncTask's performance targets, judged on this run only (median of the per-repetition values, "
        "(min-max) beside it). Rows missing here were not measured in this run.",
        "",
        "| target | wanted | measured | verdict |",
        "|---|---|---|---|",
        *rows,
        *ceiling_lines(run),
        "",
    ]
    return "\n".join(lines)


def write(run: Run, out_dir: Path) -> None:
    """Put the Targets section right after the machine list of RESULTS.md."""
    document.write_section(out_dir, TITLE, markdown(run), first=True)
