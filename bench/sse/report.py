"""The sse section of RESULTS.md and stdout, and ``sse.json``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from bench.core import document
from bench.core.fmt import percentile, spread
from bench.sse.section import SPARE_THREADS, SseResults

TITLE = "SSE fan-out"
JSON_FILE = "sse.json"


def _per_worker(pids: list[int]) -> str:
    counts = sorted((pids.count(pid) for pid in set(pids) if pid), reverse=True)
    unknown = pids.count(0)
    return " / ".join(str(n) for n in counts) + (f" ({unknown} not found)" if unknown else "")


def _count(value: float) -> str:
    return f"{value:g}"


def table(results: SseResults) -> list[str]:
    """Markdown: the run's configuration, then one row per figure."""
    r = results
    lines = [
        f"One task of {r.jobs:,} no-op jobs (`create_task`, chunk_size 1) on PostgreSQL; {r.clients} "
        "clients stream `GET /api/tasks/<id>/stream` (Server-Sent Events) from one separate asyncio "
        "process (raw HTTP/1.1). API server: `python -m asynctask api "
        f"--workers {r.api_workers} --threads {r.api_threads}`: gunicorn's gthread worker holds a "
        f"thread per open stream, and either worker may be handed any share of the connections, "
        f"so each gets one thread per client, a third more (a quarter of a worker's threads stays "
        f"free of streams) and {SPARE_THREADS} spare, and may hold a stream per client "
        "(`ASYNCTASK_API_MAX_STREAMS`, `ASYNCTASK_API_MAX_TENANT_STREAMS`). Each worker process "
        "reads a watched "
        f"task once per `stream_interval` ({r.stream_interval_s:g} s) and wakes its streams when the "
        "snapshot changed. Once every client has its first snapshot, one AsyncTask worker "
        f"(`-c {r.concurrency}`, tracking on) runs the jobs.",
        "",
    ]
    if r.error:
        lines += [f"FAILED: {r.error}", ""]
    if not r.first_snapshot_ms:
        return lines
    ms = [f"{percentile(r.end_lag_ms, p):.0f}" for p in (50, 99, 100)]
    from_job = [f"{percentile(r.end_after_last_job_ms, p):.0f}" for p in (50, 99, 100)]
    lines += [
        "| figure | value |",
        "|---|---|",
        f"| clients connected / got `end` | {r.connected} / {r.ended} |",
        f"| all {r.clients} connected (last first snapshot), s | {r.connect_all_s:.2f} |",
        f"| first snapshot per client, ms, p50 / max | {percentile(r.first_snapshot_ms, 50):.0f} / "
        f"{max(r.first_snapshot_ms):.0f} |",
        f"| progress events per client after the worker started | {spread(r.progress_events, _count)} |",
        f"| worker: spawn -> first job / first -> last job, s | {r.startup_s:.2f} / {r.drain_s:.2f} |",
        f"| last job -> SQL reports the task finished, ms | {r.sql_caught_up_s * 1000:.0f} |",
        f"| SQL finished -> client's `end`, ms, p50 / p99 / max | {' / '.join(ms)} |",
        f"| last job -> client's `end`, ms, p50 / p99 / max | {' / '.join(from_job)} |",
        f"| streams per API worker process | {_per_worker(r.api_worker)} |",
        f"| first -> last client's `end`, ms: all clients / within one API worker (the most) | "
        f"{r.end_spread_ms:.0f} / {r.end_spread_worker_ms:.0f} |",
        f"| API server CPU s: connecting / fan-out (worker start -> every `end`) | "
        f"{r.server_cpu_connect_s:.2f} / {r.server_cpu_s:.2f} |",
        f"| API server RSS, MiB: before / peak (arbiter + {r.api_workers} workers) | "
        f"{r.server_rss_before_mib:.0f} / {r.server_rss_peak_mib:.0f} |",
        f"| CPU s of the clients' process / of the worker | {r.clients_cpu_s:.2f} / {r.worker_cpu_s:.2f} |",
        "",
        "*SQL finished* is the first `get_task` (polled every 5 ms, only after the last job's "
        "marker byte, so nothing reads SQL while jobs run) that reports the task finished; a "
        "stream's reader may see it a few ms before that poll does (a negative lag). The lag "
        f"includes the wait for the reader's next look (up to {r.stream_interval_s:g} s); each "
        "API worker process reads on its own clock, so the spread over all clients holds the "
        "gap between the workers' looks, and the spread within one worker is the fan-out "
        "itself (which worker holds a connection is read from the workers' sockets once the "
        "clients are connected). Percentiles are nearest-rank over the clients; the per-client "
        "timelines (seconds after the worker's spawn) are in the JSON.",
    ]
    return lines


def tables(results: SseResults) -> str:
    return document.section(TITLE, table(results))


def write(results: SseResults, out_dir: Path) -> None:
    document.write_section(out_dir, TITLE, tables(results), JSON_FILE, dataclasses.asdict(results))
