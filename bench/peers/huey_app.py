"""Huey side of the sql section: a ``SqliteHuey`` on ``BENCH_SQLITE`` and its no-op task.

Runs in the peers' virtualenv only. The consumer loads it as ``huey_app.huey``; the task
appends one byte to the O_APPEND file named by ``BENCH_MARKER`` (workers only), exactly like
AsyncTask's ``bench/core/noop_jobs.py``, so all systems are timed the same way.

``BENCH_HUEY_SYNCHRONOUS=NORMAL`` gives Huey the durability AsyncTask's SQLite connections
have (WAL with ``synchronous=NORMAL``: no fsync per commit); Huey's own default leaves
SQLite's, FULL (an fsync per commit), and its ``fsync`` option offers only FULL or OFF.
"""

from __future__ import annotations

import os
import sqlite3

import marker  # type: ignore[import-not-found]  # beside this file, on PYTHONPATH
from huey import SqliteHuey  # type: ignore[import-not-found]  # in the peers' venv only
from huey.storage import SqliteStorage  # type: ignore[import-not-found]


class NormalSyncStorage(SqliteStorage):  # type: ignore[misc]
    """Huey's SQLite storage, every connection with ``PRAGMA synchronous=NORMAL``."""

    def _create_connection(self) -> sqlite3.Connection:
        connection: sqlite3.Connection = super()._create_connection()
        connection.execute("PRAGMA synchronous=NORMAL")
        return connection


_normal = os.environ.get("BENCH_HUEY_SYNCHRONOUS") == "NORMAL"
#: Huey's defaults otherwise: WAL, results stored (a no-op returns None, which Huey does not store).
huey = SqliteHuey(
    "bench", filename=os.environ["BENCH_SQLITE"], storage_class=NormalSyncStorage if _normal else None
)


# Huey's own function, not marker's: Huey names a task by its function's module.
@huey.task(name="noop")  # type: ignore[untyped-decorator]
def noop() -> None:
    os.write(marker.FD, b".")
