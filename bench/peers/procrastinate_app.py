"""procrastinate side of the sql section: an ``App`` on ``BENCH_PG_URL`` and its no-op task.

Runs in the peers' virtualenv only; the worker loads it as ``procrastinate_app.app``. The
task is a coroutine, procrastinate's native kind (a plain function would go through a thread
pool), and appends one byte to ``BENCH_MARKER`` like every other system's no-op job.
"""

from __future__ import annotations

import os

import marker  # type: ignore[import-not-found]  # beside this file, on PYTHONPATH
from procrastinate import App, PsycopgConnector  # type: ignore[import-not-found]  # peers' venv only

#: procrastinate's defaults: a psycopg_pool.AsyncConnectionPool with its default sizes.
app = App(connector=PsycopgConnector(conninfo=os.environ["BENCH_PG_URL"]))


@app.task(name="noop")  # type: ignore[untyped-decorator]
async def noop() -> None:
    os.write(marker.FD, b".")
