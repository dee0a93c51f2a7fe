"""The bench's sections, each behind one protocol (``Section``), and one run's results across them.

A section runs once per bench run, given a ``Context``, and gives back its results; the run
keeps them by section. A section that did not run has no results, and leaves nothing in the
tables, the report or the errors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar, cast

from bench.api import report as api_report
from bench.api import section as api
from bench.ceiling import section as ceiling
from bench.core import document
from bench.core.redis_server import RedisServer
from bench.core.report import DrainReport, ReportedResults
from bench.core.system import System
from bench.fair import report as fair_report
from bench.fair import section as fair
from bench.feeds import report as feeds_report
from bench.feeds import section as feeds
from bench.flow import report as flow_report
from bench.flow import section as flow
from bench.integrations import report as integrations_report
from bench.integrations import section as integrations
from bench.latency import section as latency
from bench.memory import section as memory
from bench.periodic import report as periodic_report
from bench.periodic import section as periodic
from bench.resumable import report as resumable_report
from bench.resumable import section as resumable
from bench.runtime import report as runtime_report
from bench.runtime import section as runtime
from bench.sql import report as sql_report
from bench.sql import section as sql
from bench.sse import report as sse_report
from bench.sse import section as sse
from bench.tracking import report as tracking_report
from bench.tracking import section as tracking

R = TypeVar("R")
D = TypeVar("D", bound=document.DrainResults)
DR = TypeVar("DR", bound=ReportedResults)


@dataclass
class Run:
    settings: dict[str, dict[str, Any]]
    systems: list[System] = field(default_factory=list)
    #: The machine and every version a reader needs to compare two runs.
    machine: dict[str, str] = field(default_factory=dict)
    #: Filled before any section runs (the systems' configurations, those skipped), so it is
    #: among the results from the start; it shows on stdout and in RESULTS.md once a drain is in it.
    runtime: runtime_report.Results = field(init=False)
    #: Each section's results, by section name, of the sections that ran.
    found: dict[str, Any] = field(default_factory=dict)
    #: Wall time of each section that ran.
    seconds: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.runtime = runtime_report.Results(self.settings["runtime"], {})
        self.found[RUNTIME.name] = self.runtime

    def results(self, section: Section[R]) -> R | None:
        """``section``'s results, or None when it did not run."""
        return cast("R | None", self.found.get(section.name))

    def versions(self) -> list[dict[str, str]]:
        return [section.versions(self.found[section.name]) for section in self.ran(SECTIONS)]

    def errors(self) -> list[str]:
        return [error for section in self.ran(SECTIONS) for error in section.errors(self.found[section.name])]

    def tables(self) -> str:
        """What stdout shows: each section's tables, without the methods."""
        parts = (section.tables(self.found[section.name]) for section in self.ran(SECTIONS))
        return "\n".join(part for part in parts if part)

    def judged_rows(self) -> list[str]:
        """The rows of the goals the sections judge on their own results."""
        return [
            row for section in self.ran(SECTIONS) for row in section.judged_rows(self.found[section.name])
        ]

    def ran(self, sections: tuple[Section[Any], ...]) -> list[Section[Any]]:
        return [section for section in sections if section.name in self.found]


@dataclass(frozen=True)
class Context:
    """What a section's run is given: the bench run (its settings and systems), the bench's
    private Redis, the work directory and the PostgreSQL to create private databases from."""

    run: Run
    server: RedisServer
    workdir: Path
    pg_url: str

    def settings(self, section: str) -> dict[str, Any]:
        return self.run.settings[section]


def _nothing(_: object) -> list[str]:
    return []


def _no_versions(_: object) -> dict[str, str]:
    return {}


@dataclass(frozen=True)
class Section(Generic[R]):
    """One section of the bench: how it runs, and how its results show on stdout, go into
    RESULTS.md and the raw data, count among the run's errors and versions, and judge its goals."""

    name: str
    run: Callable[[Context], R]
    tables: Callable[[R], str]
    #: Its part of RESULTS.md and its raw data, given the run (machine, settings) and the directory.
    write: Callable[[R, Run, Path], None]
    errors: Callable[[R], list[str]]
    versions: Callable[[R], dict[str, str]] = _no_versions
    judged_rows: Callable[[R], list[str]] = _nothing


def _reported(
    name: str,
    run: Callable[[dict[str, Any], str, RedisServer, Path], D],
    tables: Callable[[D], str],
    write: Callable[[D, dict[str, str], Path], None],
    judged_rows: Callable[[D], list[str]] = _nothing,
) -> Section[D]:
    """A section run on its own settings, the PostgreSQL URL, the private Redis and the work
    directory, written with the machine, its results reporting their errors and versions."""
    return Section(
        name,
        run=lambda at: run(at.settings(name), at.pg_url, at.server, at.workdir),
        tables=tables,
        write=lambda results, bench_run, out_dir: write(results, bench_run.machine, out_dir),
        errors=lambda results: results.errors(),
        versions=lambda results: results.versions,
        judged_rows=judged_rows,
    )


def drain_section(
    name: str,
    run: Callable[[dict[str, Any], str, RedisServer, Path], DR],
    report: DrainReport[DR],
) -> Section[DR]:
    """A drain section, shown, written and judged by its ``DrainReport``."""
    return _reported(name, run, report.tables, report.write, report.judged_rows)


class SystemRun(Protocol):
    system: str
    error: str


S = TypeVar("S", bound=SystemRun)


def _per_system(
    name: str,
    run: Callable[[dict[str, Any], list[System], RedisServer, Path], list[S]],
    tables: Callable[[list[S]], str],
    write: Callable[[list[S], dict[str, Any], Path], None],
) -> Section[list[S]]:
    """A section measuring each system under test in turn; its errors name the system."""
    return Section(
        name,
        run=lambda at: run(at.settings(name), at.run.systems, at.server, at.workdir),
        tables=tables,
        write=lambda runs, bench_run, out_dir: write(runs, bench_run.settings[name], out_dir),
        errors=lambda runs: [f"{name} {r.system}: {r.error}" for r in runs if r.error],
    )


def _run_runtime(at: Context) -> runtime_report.Results:
    runtime.run(at.run.runtime, at.run.systems, at.server, at.workdir)
    return at.run.runtime


def _runtime_tables(results: runtime_report.Results) -> str:
    return runtime_report.tables(results) if results.process else ""


RUNTIME = Section(
    "runtime",
    run=_run_runtime,
    tables=_runtime_tables,
    write=lambda results, bench_run, out_dir: runtime_report.write(results, bench_run.machine, out_dir),
    errors=lambda results: results.errors(),
)
LATENCY = _per_system("latency", latency.run, latency.tables, latency.write)
MEMORY = _per_system("memory", memory.run, memory.tables, memory.write)
CEILING = Section(
    "ceiling",
    run=lambda at: ceiling.measure(
        at.server, at.settings("ceiling")["requests"], at.settings("ceiling")["clients"]
    ),
    tables=ceiling.tables,
    write=lambda found, _, out_dir: ceiling.write(found, out_dir),
    errors=lambda found: [f"ceiling: {e}" for e in found.errors()],
)
TRACKING = _reported("tracking", tracking.run, tracking_report.tables, tracking_report.write)
API = _reported("api", api.run, api_report.tables, api_report.write)
SSE = Section(
    "sse",
    run=lambda at: sse.run(at.settings("sse"), at.pg_url, at.server, at.workdir),
    tables=sse_report.tables,
    write=lambda results, _, out_dir: sse_report.write(results, out_dir),
    errors=lambda results: [f"sse: {results.error}"] if results.error else [],
    versions=lambda results: results.versions,
)
SQL = Section(
    "sql",
    run=lambda at: sql.run(at.settings("sql"), at.pg_url, at.workdir),
    tables=sql_report.tables,
    write=lambda results, bench_run, out_dir: sql_report.write(results, bench_run.machine, out_dir),
    errors=lambda results: results.errors(),
    versions=lambda results: results.versions,
)
FLOW = drain_section("flow", flow.run, flow_report.REPORT)
FEEDS = drain_section("feeds", feeds.run, feeds_report.REPORT)
FAIR = drain_section("fair", fair.run, fair_report.REPORT)
PERIODIC = drain_section("periodic", periodic.run, periodic_report.REPORT)
RESUMABLE = drain_section("resumable", resumable.run, resumable_report.REPORT)
INTEGRATIONS = drain_section("integrations", integrations.run, integrations_report.REPORT)

#: Every section, in the order they run and show on stdout.
SECTIONS: tuple[Section[Any], ...] = (
    RUNTIME,
    LATENCY,
    MEMORY,
    CEILING,
    TRACKING,
    API,
    SSE,
    SQL,
    FLOW,
    FEEDS,
    FAIR,
    PERIODIC,
    RESUMABLE,
    INTEGRATIONS,
)
#: The sections RESULTS.md lists after all the others (which keep the order they run in):
#: the single measures after the drains' comparisons.
_LAST_IN_DOCUMENT = (LATENCY, MEMORY, CEILING, SSE)
DOCUMENT_ORDER = (*(section for section in SECTIONS if section not in _LAST_IN_DOCUMENT), *_LAST_IN_DOCUMENT)


def write(run: Run, out_dir: Path) -> None:
    """A new RESULTS.md in ``out_dir`` with the sections that ran, and their raw data."""
    document.start(out_dir, run.settings["runtime"]["command"], run.machine)
    for section in run.ran(DOCUMENT_ORDER):
        section.write(run.found[section.name], run, out_dir)
