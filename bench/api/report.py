"""The api section of RESULTS.md and stdout, and ``api.json``.

As in the other sections: medians of the repetitions with (min-max).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.api.section import ApiResults, LoadRun, PostRun
from bench.api.server import CACHED, UNCACHED, VARIANTS, WORKERS
from bench.core import document
from bench.core.fmt import fixed, rate, section_text, spread

#: The API's target: p99 of GET /api/tasks/<id> under 10 ms on PostgreSQL, 1,000,000 events.
TARGET_P99_MS = 10.0
TARGET_EVENTS = 1_000_000
MIB = 2**20
JSON_FILE = "api.json"


def _verdict(met: bool, applies: bool) -> str:
    if not applies:
        return "n/a at this size"
    return "met" if met else "**missed**"


def _variants(results: ApiResults) -> list[str]:
    """The servers of the load, in the order they ran (``VARIANTS``' for an empty result)."""
    return list(dict.fromkeys(r.variant for r in results.loads)) or list(VARIANTS)


def _loads(results: ApiResults, connections: int, variant: str) -> list[LoadRun]:
    return [r for r in results.loads if r.connections == connections and r.variant == variant and not r.error]


def load_table(results: ApiResults) -> list[str]:
    big = results.big_task
    applies = big is not None and big.events >= TARGET_EVENTS
    lines = [
        "| connections | server | requests/s | p50 ms | p90 ms | **p99 ms** | p99.9 ms | max ms "
        "| CPU ms/request: API server + PostgreSQL + wrk | load avg before | target p99 < 10 ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for connections, variant in ((c, v) for c in results.settings["connections"] for v in _variants(results)):
        runs = _loads(results, connections, variant)
        if not runs:
            lines.append(f"| {connections} | {variant} | failed | | | | | | | | |")
            continue

        def ms(metric: Callable[[LoadRun], float], runs: list[LoadRun] = runs) -> str:
            return spread((metric(r) for r in runs), fixed(2))

        def cpu(metric: Callable[[LoadRun], float], runs: list[LoadRun] = runs) -> str:
            return f"{statistics.median(r.per_request_ms(metric(r)) for r in runs):.2f}"

        p99 = statistics.median(r.p99_ms for r in runs)
        lines.append(
            f"| {connections} | {variant} | {spread((r.rate for r in runs), rate)} "
            f"| {ms(lambda r: r.p50_ms)} "
            f"| {ms(lambda r: r.p90_ms)} | **{ms(lambda r: r.p99_ms)}** | {ms(lambda r: r.p999_ms)} "
            f"| {ms(lambda r: r.max_ms)} | {cpu(lambda r: r.server_cpu_s)} + "
            f"{cpu(lambda r: r.postgres_cpu_s)} + {cpu(lambda r: r.wrk_cpu_s)} "
            f"| {spread((r.load_before for r in runs), fixed(2))} "
            f"| {_verdict(p99 < TARGET_P99_MS, applies)} |"
        )
    return lines


def _cache_s() -> str:
    return CACHED.removeprefix("errors cache ")


def _posts(results: ApiResults, database: str, fmt: str) -> list[PostRun]:
    return [r for r in results.posts if r.database == database and r.format == fmt and not r.error]


def post_table(results: ApiResults) -> list[str]:
    lines = [
        "| database | format | items | body MiB | **POST → 202, s** | items/s | API server CPU s "
        "| worker RSS before, MiB | worker RSS growth (peak), MiB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    keys = list(dict.fromkeys((r.database, r.format) for r in results.posts))
    for database, fmt in keys:
        runs = _posts(results, database, fmt)
        if not runs:
            lines.append(f"| {database} | {fmt} | | | failed | | | | |")
            continue
        lines.append(
            f"| {database} | {fmt} | {runs[0].items:,} | {runs[0].body_bytes / MIB:.1f} "
            f"| **{spread((r.seconds for r in runs), fixed(2))}** | {spread((r.rate for r in runs), rate)} "
            f"| {spread((r.server_cpu_s for r in runs), fixed(2))} "
            f"| {spread((r.rss_before_mib for r in runs), fixed(0))} "
            f"| {spread((r.rss_growth_mib for r in runs), fixed(1))} |"
        )
    return lines


def tables(results: ApiResults) -> str:
    s = results.settings
    big = results.big_task
    quick = " (--quick sizes: smoke run; the target applies to 1,000,000 events)" if s["quick"] else ""
    server = f"`python -m asynctask api --workers {WORKERS} --threads {s['threads']}`"
    parts: list[str] = []
    if big is not None:
        counts = ", ".join(f"{k} {v:,}" for k, v in big.counts.items() if v)
        parts += [
            f"`GET /api/tasks/<id>` on PostgreSQL{quick}: one task of {big.events:,} events ({counts}), "
            f"{big.messages:,} messages, plus {big.small_tasks:,} small tasks; each response "
            f"({results.response_bytes:,} bytes) holds the task and its first 10 errors with their "
            f"messages. Two servers {server} on the same database: **{CACHED}** (the default "
            f"settings) and **{UNCACHED}** (`ASYNCTASK_API_ERRORS_CACHE_SECONDS=0`). The errors "
            "cache reuses a task's first errors (two of `get_task`'s three statements) for at most "
            f"{_cache_s()} while the task's failed and error counts, finish time and state are "
            "unchanged, so a new failure shows at once. wrk reads one task over and over, so the "
            f"*{CACHED}* rows measure the cached path (the first errors read about once a second "
            f"per worker); the *{UNCACHED}* rows are the cost of an uncached read. "
            f"`wrk -t1 -cC -d{s['duration_s']}s --latency`, {s['reps']} rep(s); in each, for each "
            "connection count, the two servers one after the other (one under load at a time), "
            f"after a {s['warmup_s']} s warm-up of each; median (min-max):",
            "",
            *load_table(results),
            "",
            "wrk (1 thread), the API server's workers and PostgreSQL share the machine's "
            f"{s['nproc']} cores, so the CPU column is the budget: at saturation requests/s ≈ "
            "cores x 1000 / (CPU ms per request), and by Little's law the mean latency ≈ "
            "connections ÷ requests/s.",
            "",
        ]
        loads = [r.load_before for r in results.loads]
        if loads and statistics.median(loads) > s["nproc"] / 2:
            parts += [
                f"**The machine was busy**: load average {statistics.median(loads):.1f} (median) before "
                f"the runs on {s['nproc']} cores, so other work competed with the server, PostgreSQL "
                "and wrk for the CPU; rerun on a quiet machine for figures to compare.",
                "",
            ]
    parts += [
        f"`POST /api/tasks` of {s['items']:,} items (chunk_size 1: one job each; the job has an "
        f"item schema), {s['post_reps']} rep(s) interleaved; median (min-max). Time from the "
        "first byte sent to the whole 202 read; RSS sampled every 5 ms on the API workers:",
        "",
        *post_table(results),
    ]
    return section_text(parts, results)


METHOD = """\
- **Server**: `python -m asynctask api --host 127.0.0.1 --port P --workers 2 --threads 8`
  (gunicorn, gthread workers) with `ASYNCTASK_DATABASE_URL` (the bench's database),
  `ASYNCTASK_REDIS_URL` (the bench's private redis-server) and
  `ASYNCTASK_REQUIRE=bench.api.jobs` (`BenchImport`: `api=True`, an item schema, queue
  `bench_api`, which no worker reads); other settings at their defaults (token cache 5 s,
  errors cache 1 s; the API's engine has no `pool_pre_ping`). Started once per database, and
  on PostgreSQL a second time, for the GET load only, with
  `ASYNCTASK_API_ERRORS_CACHE_SECONDS=0`; the bench waits for `/readyz` and both workers.
- **Errors cache** (`asynctask/tracking/cache.py`): per worker process, a task's first
  errors are kept with the task row's failed count, error count, finish time and state, and
  reused while those are unchanged, for 1 s at most; a new failure changes the counts, so it
  shows at once. wrk requests one task, so the default server serves nearly every GET from
  the cache (the first errors are read again about once a second per worker); the
  `errors cache off` server reads them on every request, as for a task polled for the first
  time or one whose errors keep changing.
- **Data**: PostgreSQL: a database `asynctask_bench_<random>` (tables from the models,
  dropped at exit) with the task of `bench/tracking/data.py` (INSERT ... SELECT
  generate_series, then VACUUM ANALYZE) and one token of its tenant (`create_token`).
  SQLite: a new file in the bench's temporary directory, tables from the models.
- **GET latency**: `wrk -t1 -cC -dDs --latency --timeout 10s -s api-get.lua` on
  `/api/tasks/<id>` (default `errors=10`); the Lua script sets `Authorization: Bearer` and
  prints wrk's histogram (p50 … p99.9, max, exact µs) and error counters as JSON at the end.
  A non-2xx answer or a socket error fails the run. One discarded warm-up run per server at
  the highest connection count first (both workers' pools filled, statements prepared);
  then, in each repetition, for each connection count, the default server and the
  cache-off server in turn, so that noise hits both alike. Only one server is under load at
  a time. CPU per request: the loaded API server's process tree, the PostgreSQL backends of
  the bench's database (pids from `pg_stat_activity`; the other server's are idle), and wrk
  (`RUSAGE_CHILDREN`), each ÷ requests.
- **POST**: `http.client` from the bench process, connection opened first; *JSON* is
  `{"job": "BenchImport", "items": [...], "chunk_size": 1}`, *CSV* is `text/csv` to
  `/api/tasks?job=BenchImport&chunk_size=1` with a header row `sku,name,price`; the same
  items (`{"sku": "SKU-0000001", "name": "Product 1", "price": "2.01"}`). Before each POST
  the tracking tables are emptied (TRUNCATE / DELETE; the token stays) and the private Redis
  FLUSHALLed; after it, the response's job count and the queue's length are checked.
  *RSS growth*: the peak RSS of the worker that served the request minus its RSS just before.
  A streamed CSV body is spooled and parsed row by row; a JSON body is parsed whole.
"""


def markdown(results: ApiResults) -> str:
    return "\n".join(
        [
            "## HTTP API",
            "",
            tables(results),
            "### Method (HTTP API)",
            "",
            METHOD,
        ]
    )


def raw(results: ApiResults, machine: dict[str, str]) -> dict[str, Any]:
    return document.section_raw(
        results,
        machine,
        big_task=asdict(results.big_task) if results.big_task else None,
        response_bytes=results.response_bytes,
        get_task_load=[
            {
                **asdict(r),
                "rate": r.rate,
                "server_cpu_ms_per_request": r.per_request_ms(r.server_cpu_s),
                "postgres_cpu_ms_per_request": r.per_request_ms(r.postgres_cpu_s),
                "wrk_cpu_ms_per_request": r.per_request_ms(r.wrk_cpu_s),
            }
            for r in results.loads
        ],
        post=[{**asdict(r), "rate": r.rate} for r in results.posts],
    )


def write(results: ApiResults, machine: dict[str, str], out_dir: Path) -> None:
    """``api.json``, and the section added to (or replaced in) the RESULTS.md in ``out_dir``."""
    document.write_section(out_dir, SECTION, markdown(results), JSON_FILE, raw(results, machine))


SECTION = "HTTP API"
