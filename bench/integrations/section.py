"""The integrations section: Celery, RQ and Dramatiq with AsyncTask's tracking attached, each
against itself without it.

For each repetition and runtime, in an order reversed every other repetition:
- ``noop_rate`` twice, untracked then tracked (reversed every other repetition too): the
  runtime's own worker (one process) drains N no-op jobs already queued, timed from the first
  start to the last end as the runtime sees them. Tracked, the jobs are one task's chunks
  (``create_task``, chunk size 1) and the worker has the integration attached;
- ``create_seconds``: ``create_task`` of M items through the runtime's client, against the
  runtime's own fastest bulk send of as many jobs, with no worker running.

Each runtime's module (``bench/integrations/<runtime>.py``) starts and stops its workers and
cleans what it created. Every call gets a Redis database of the section's private Redis and an
empty tracking database: PostgreSQL (a database created for the run, dropped after), or SQLite
files when PostgreSQL cannot be reached.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asynctask.db.migrate import upgrade
from bench.core.postgres import postgres_unreachable, shown
from bench.core.redis_server import RedisServer
from bench.core.results import SectionResults, section_frame
from bench.tracking.db import PostgresDatabase

RUNTIMES = ("celery", "rq", "dramatiq")
NOOP = "noop"
CREATE = "create"
#: The Redis database of each runtime's calls (the private server's db 0 is the bench's own).
REDIS_DB = {"celery": 1, "rq": 2, "dramatiq": 3}


@dataclass
class IntegrationRun:
    backend: str  # the runtime
    case: str  # NOOP or CREATE
    untracked: float = 0.0  # jobs/s (NOOP) or the runtime's own bulk send, seconds (CREATE)
    tracked: float = 0.0  # jobs/s (NOOP) or create_task, seconds (CREATE)
    error: str = ""

    def ratio(self) -> float:
        """Tracked ÷ untracked rate (NOOP), create_task ÷ bulk send time (CREATE)."""
        return self.tracked / self.untracked if self.untracked else 0.0


@dataclass
class IntegrationResults(SectionResults[IntegrationRun]):
    """The integrations section's results."""


def order(rep: int) -> list[str]:
    return list(RUNTIMES) if rep % 2 == 0 else list(reversed(RUNTIMES))


def run(settings: dict[str, Any], pg_url: str, server: RedisServer, workdir: Path) -> IntegrationResults:
    """Run the section; ``pg_url`` is PostgreSQL's admin connection."""
    results = IntegrationResults(settings)
    with section_frame(results, ("redis", "SQLAlchemy", "celery", "rq", "dramatiq")):
        unreachable = postgres_unreachable(pg_url)
        databases = TrackingDatabases(None if unreachable else pg_url, workdir)
        if unreachable is None:
            results.databases["postgresql"] = f"{shown(pg_url)}: a database created per call, dropped after"
        else:
            results.databases["postgresql"] = f"skipped: {unreachable}"
            results.databases["sqlite"] = "a new file per call in the bench's temporary directory"
        for rep in range(settings["reps"]):
            for runtime in order(rep):
                _repetition(results, runtime, rep, server, databases)
    return results


class TrackingDatabases:
    """An empty, migrated tracking database per call: PostgreSQL when ``pg_url`` is given."""

    def __init__(self, pg_url: str | None, workdir: Path) -> None:
        self.pg_url = pg_url
        self.workdir = workdir
        self._count = 0

    @contextmanager
    def fresh(self) -> Iterator[str]:
        if self.pg_url is None:
            self._count += 1
            url = f"sqlite:///{self.workdir / f'integrations-{self._count}.db'}"
            upgrade(url)
            yield url
            return
        with PostgresDatabase(self.pg_url) as database:
            upgrade(database.url)
            yield database.url


def _repetition(
    results: IntegrationResults, runtime: str, rep: int, server: RedisServer, databases: TrackingDatabases
) -> None:
    s = results.settings
    redis_url = server.url.rsplit("/", 1)[0] + f"/{REDIS_DB[runtime]}"
    noop = IntegrationRun(runtime, NOOP)
    create = IntegrationRun(runtime, CREATE)

    module = importlib.import_module(f"bench.integrations.{runtime}")
    rate: Callable[..., float] = module.noop_rate
    try:
        for tracked in (False, True) if rep % 2 == 0 else (True, False):
            with databases.fresh() as url:
                value = rate(redis_url, url, s["jobs"], tracked)
            if tracked:
                noop.tracked = value
            else:
                noop.untracked = value
    except Exception as exc:  # a runtime's failure is a figure's error, not the bench's end
        noop.error = f"{type(exc).__name__}: {exc}"[:1500]
    try:
        with databases.fresh() as url:
            create.tracked, create.untracked = module.create_seconds(redis_url, url, s["items"])
    except Exception as exc:
        create.error = f"{type(exc).__name__}: {exc}"[:1500]
    for one in (noop, create):
        results.runs.append((rep, one))
        _say(rep, s["reps"], one)


def _say(rep: int, reps: int, one: IntegrationRun) -> None:
    label = f"rep {rep + 1}/{reps} integrations: {one.backend} {one.case}"
    if one.error:
        print(f"{label}: FAILED: {one.error[-300:]}", file=sys.stderr)
    elif one.case == NOOP:
        print(
            f"{label}: {one.untracked:,.0f} -> {one.tracked:,.0f} jobs/s ({one.ratio():.2f}x)",
            file=sys.stderr,
        )
    else:
        print(f"{label}: bulk send {one.untracked:.2f} s, create_task {one.tracked:.2f} s", file=sys.stderr)
