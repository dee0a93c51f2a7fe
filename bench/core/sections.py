"""One bench run's results across sections, and the RESULTS.md sections of latency, memory,
the Redis ceiling and SSE fan-out (each with its own JSON file beside RESULTS.md)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.api import report as api_report
from bench.api.section import ApiResults
from bench.ceiling import section as ceiling
from bench.core.system import System
from bench.latency import section as latency
from bench.memory import section as memory
from bench.runtime import report
from bench.sql import report as sql_report
from bench.sql.section import SqlResults
from bench.sse import section as sse
from bench.tracking import report as tracking_report

LATENCY = ("Latency: enqueue to start", "latency.json")
MEMORY = ("Memory: worker RSS idle and after many jobs", "memory.json")
CEILING = ("Redis ceiling", "ceiling.json")
SSE = ("SSE fan-out", "sse.json")

LATENCY_METHOD = [
    "One worker process per system (10 job slots), idle and warm: the bench waits for one no-op",
    "job to run first. The system's own client then enqueues latency jobs one call at a time,",
    "paced at a steady rate; each job's argument is `time.time()` at its enqueue and the job",
    "appends `time.time()` minus that, at its start, to the marker file. Same clock, same machine.",
    "Percentiles of each run; median of the repetitions with (min-max). A system that drains",
    "fewer jobs per second than the rate builds a backlog, so its latency is queueing time;",
    "those systems send only their capped N (see the runtime section) to keep the run short.",
]


@dataclass
class Run:
    settings: dict[str, dict[str, Any]]
    systems: list[System] = field(default_factory=list)
    runtime: report.Results = field(init=False)
    latency: list[latency.LatencyRun] | None = None
    memory: list[memory.MemoryRun] | None = None
    ceiling: ceiling.Ceiling | None = None
    api: ApiResults | None = None
    sse: sse.SseResults | None = None
    sql: SqlResults | None = None
    #: Wall time of each section that ran.
    seconds: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.runtime = report.Results(self.settings["runtime"], {})

    def versions(self) -> list[dict[str, str]]:
        found = [self.runtime.tracking.versions] if self.runtime.tracking is not None else []
        return found + [part.versions for part in (self.api, self.sse, self.sql) if part is not None]

    def errors(self) -> list[str]:
        errors = self.runtime.errors()
        errors += [f"latency {r.system}: {r.error}" for r in self.latency or [] if r.error]
        errors += [f"memory {r.system}: {r.error}" for r in self.memory or [] if r.error]
        errors += self.api.errors() if self.api is not None else []
        errors += [f"sse: {self.sse.error}"] if self.sse is not None and self.sse.error else []
        errors += [f"ceiling: {e}" for e in self.ceiling.errors()] if self.ceiling is not None else []
        return errors + (self.sql.errors() if self.sql is not None else [])

    def tables(self) -> str:
        parts = [report.tables(self.runtime)] if self.runtime.process else []
        if self.latency is not None:
            parts.append(_markdown(LATENCY[0], latency.table(self.latency)))
        if self.memory is not None:
            parts.append(_markdown(MEMORY[0], memory.table(self.memory)))
        if self.ceiling is not None:
            parts.append(_markdown(CEILING[0], ceiling.table(self.ceiling)))
        if self.runtime.tracking is not None:
            parts.append(tracking_report.tables(self.runtime.tracking))
        if self.api is not None:
            parts.append(api_report.tables(self.api))
        if self.sse is not None:
            parts.append(_markdown(SSE[0], sse.table(self.sse)))
        if self.sql is not None:
            parts.append(sql_report.tables(self.sql))
        return "\n".join(parts)


def _markdown(title: str, lines: list[str]) -> str:
    return "\n".join([f"## {title}", "", *lines, ""])


def _section(out_dir: Path, title_and_file: tuple[str, str], lines: list[str], data: Any) -> None:
    title, json_file = title_and_file
    report.write_section(out_dir, title, _markdown(title, lines), json_file, data)


def write(run: Run, out_dir: Path) -> None:
    """The sections of this module that ran, into RESULTS.md and their JSON files."""
    if run.latency is not None:
        data = {"settings": run.settings["latency"], "runs": [r.to_json() for r in run.latency]}
        _section(out_dir, LATENCY, [*LATENCY_METHOD, "", *latency.table(run.latency)], data)
    if run.memory is not None:
        data = {"settings": run.settings["memory"], "runs": [dataclasses.asdict(r) for r in run.memory]}
        _section(out_dir, MEMORY, [memory.METHOD, "", *memory.table(run.memory)], data)
    if run.ceiling is not None:
        _section(out_dir, CEILING, ceiling.table(run.ceiling), dataclasses.asdict(run.ceiling))
    if run.sse is not None:
        _section(out_dir, SSE, sse.table(run.sse), dataclasses.asdict(run.sse))
