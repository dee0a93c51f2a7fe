"""One bench run's results across sections: their errors, their tables, their report.

Every section's results are None (or empty) when it did not run, and then leave nothing in
the tables or the report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.api import report as api_report
from bench.api.section import ApiResults
from bench.ceiling import section as ceiling
from bench.core import document
from bench.core.system import System
from bench.fair import report as fair_report
from bench.fair.section import FairResults
from bench.feeds import report as feeds_report
from bench.feeds.section import FeedResults
from bench.flow import report as flow_report
from bench.flow.section import FlowResults
from bench.integrations import report as integrations_report
from bench.integrations.section import IntegrationResults
from bench.latency import section as latency
from bench.memory import section as memory
from bench.periodic import report as periodic_report
from bench.periodic.section import PeriodicResults
from bench.resumable import report as resumable_report
from bench.resumable.section import ResumableResults
from bench.runtime import report as runtime_report
from bench.sql import report as sql_report
from bench.sql.section import SqlResults
from bench.sse import report as sse_report
from bench.sse.section import SseResults
from bench.tracking import report as tracking_report
from bench.tracking.section import TrackingResults


@dataclass
class Run:
    settings: dict[str, dict[str, Any]]
    systems: list[System] = field(default_factory=list)
    #: The machine and every version a reader needs to compare two runs.
    machine: dict[str, str] = field(default_factory=dict)
    runtime: runtime_report.Results = field(init=False)
    latency: list[latency.LatencyRun] | None = None
    memory: list[memory.MemoryRun] | None = None
    ceiling: ceiling.Ceiling | None = None
    tracking: TrackingResults | None = None
    api: ApiResults | None = None
    sse: SseResults | None = None
    sql: SqlResults | None = None
    flow: FlowResults | None = None
    feeds: FeedResults | None = None
    fair: FairResults | None = None
    periodic: PeriodicResults | None = None
    resumable: ResumableResults | None = None
    integrations: IntegrationResults | None = None
    #: Wall time of each section that ran.
    seconds: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.runtime = runtime_report.Results(self.settings["runtime"], {})

    def versions(self) -> list[dict[str, str]]:
        parts = (
            self.tracking,
            self.api,
            self.sse,
            self.sql,
            self.flow,
            self.feeds,
            self.fair,
            self.periodic,
            self.resumable,
            self.integrations,
        )
        return [part.versions for part in parts if part is not None]

    def errors(self) -> list[str]:
        errors = self.runtime.errors()
        errors += self.tracking.errors() if self.tracking is not None else []
        errors += [f"latency {r.system}: {r.error}" for r in self.latency or [] if r.error]
        errors += [f"memory {r.system}: {r.error}" for r in self.memory or [] if r.error]
        errors += self.api.errors() if self.api is not None else []
        errors += [f"sse: {self.sse.error}"] if self.sse is not None and self.sse.error else []
        errors += [f"ceiling: {e}" for e in self.ceiling.errors()] if self.ceiling is not None else []
        errors += self.flow.errors() if self.flow is not None else []
        errors += self.feeds.errors() if self.feeds is not None else []
        errors += self.fair.errors() if self.fair is not None else []
        errors += self.periodic.errors() if self.periodic is not None else []
        errors += self.resumable.errors() if self.resumable is not None else []
        errors += self.integrations.errors() if self.integrations is not None else []
        return errors + (self.sql.errors() if self.sql is not None else [])

    def tables(self) -> str:
        """What stdout shows: each section's tables, without the methods."""
        parts = [runtime_report.tables(self.runtime)] if self.runtime.process else []
        if self.latency is not None:
            parts.append(latency.tables(self.latency))
        if self.memory is not None:
            parts.append(memory.tables(self.memory))
        if self.ceiling is not None:
            parts.append(ceiling.tables(self.ceiling))
        if self.tracking is not None:
            parts.append(tracking_report.tables(self.tracking))
        if self.api is not None:
            parts.append(api_report.tables(self.api))
        if self.sse is not None:
            parts.append(sse_report.tables(self.sse))
        if self.sql is not None:
            parts.append(sql_report.tables(self.sql))
        if self.flow is not None:
            parts.append(flow_report.tables(self.flow))
        if self.feeds is not None:
            parts.append(feeds_report.tables(self.feeds))
        if self.fair is not None:
            parts.append(fair_report.tables(self.fair))
        if self.periodic is not None:
            parts.append(periodic_report.tables(self.periodic))
        if self.resumable is not None:
            parts.append(resumable_report.tables(self.resumable))
        if self.integrations is not None:
            parts.append(integrations_report.tables(self.integrations))
        return "\n".join(parts)


def write(run: Run, out_dir: Path) -> None:
    """A new RESULTS.md in ``out_dir`` with the sections that ran, and their raw data."""
    document.start(out_dir, run.settings["runtime"]["command"], run.machine)
    runtime_report.write(run.runtime, run.machine, out_dir)
    if run.tracking is not None:
        tracking_report.write(run.tracking, run.machine, out_dir)
    if run.api is not None:
        api_report.write(run.api, run.machine, out_dir)
    if run.sql is not None:
        sql_report.write(run.sql, run.machine, out_dir)
    if run.flow is not None:
        flow_report.write(run.flow, run.machine, out_dir)
    if run.feeds is not None:
        feeds_report.write(run.feeds, run.machine, out_dir)
    if run.fair is not None:
        fair_report.write(run.fair, run.machine, out_dir)
    if run.periodic is not None:
        periodic_report.write(run.periodic, run.machine, out_dir)
    if run.resumable is not None:
        resumable_report.write(run.resumable, run.machine, out_dir)
    if run.integrations is not None:
        integrations_report.write(run.integrations, run.machine, out_dir)
    if run.latency is not None:
        latency.write(run.latency, run.settings["latency"], out_dir)
    if run.memory is not None:
        memory.write(run.memory, run.settings["memory"], out_dir)
    if run.ceiling is not None:
        ceiling.write(run.ceiling, out_dir)
    if run.sse is not None:
        sse_report.write(run.sse, out_dir)
