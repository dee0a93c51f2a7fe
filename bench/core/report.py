"""What the drain sections' reports share: their runs picked by repetition, their per-repetition
ratios, their verdict rows, and ``DrainReport``, which shows a section on stdout and writes its
part of RESULTS.md and its JSON file the same way for all of them."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from bench.core import procs
from bench.core.document import DrainResults, drain_markdown, drain_raw, write_section
from bench.core.drain import POSTGRESQL, REDIS, DrainRun
from bench.core.fmt import drain_tables, fixed, judged, rate, ratio, section_tail, spread, verdict
from bench.core.results import R, SectionResults

BACKEND_NAMES = {REDIS: "Redis", POSTGRESQL: "PostgreSQL"}
#: What a section's introduction says of a --quick run's figures.
QUICK_SIZES = " (--quick sizes: a smoke run, not figures to compare)"
#: The method's last item in the sections that give ``drain.watch``'s CPU figures per job.
CPU_METHOD = """\
- **CPU**: user + system CPU of all worker process trees and of the PostgreSQL backends
  serving the database, first -> last job done, ÷ N.
"""


def quick_note(settings: dict[str, Any]) -> str:
    return QUICK_SIZES if settings["quick"] else ""


def ok_by_rep(results: SectionResults[R], backend: str, case: str) -> dict[int, R]:
    """The runs of ``case`` on ``backend`` that did not fail, by repetition."""
    return {rep: r for rep, r in results.runs if r.backend == backend and r.case == case and not r.error}


def per_rep(
    results: SectionResults[R], backend: str, ours: str, base: str, value: Callable[[R, R], float]
) -> list[float]:
    """``value(ours, base)`` of each repetition in which both cases ran without failing."""
    mine, theirs = ok_by_rep(results, backend, ours), ok_by_rep(results, backend, base)
    return [value(mine[rep], theirs[rep]) for rep in mine if rep in theirs]


def case_runs(results: SectionResults[R], cases: Sequence[str]) -> Iterator[tuple[str, list[R]]]:
    """Per backend (Redis, then PostgreSQL) and case in turn, the backend and the case's runs
    that did not fail, where there are any: a table's rows."""
    for backend in (REDIS, POSTGRESQL):
        for case in cases:
            runs = list(ok_by_rep(results, backend, case).values())
            if runs:
                yield backend, runs


def both_runs(results: SectionResults[R], ours: str, base: str) -> Iterator[tuple[str, list[R], list[R]]]:
    """Per backend (Redis, then PostgreSQL) where either case has runs that did not fail, the
    backend and those runs of each: the rows of a table that sets two cases side by side."""
    for backend in (REDIS, POSTGRESQL):
        mine, theirs = ok_by_rep(results, backend, ours), ok_by_rep(results, backend, base)
        if mine or theirs:
            yield backend, list(mine.values()), list(theirs.values())


class Tenths(Protocol):
    def tenth_rate(self, last: bool) -> float: ...


def first_over_last_tenth(runs: Iterable[Tenths]) -> str:
    """The rate over the first tenth of the jobs ÷ over the last, of the runs that have both."""
    both = [r for r in runs if min(r.tenth_rate(False), r.tenth_rate(True)) > 0]
    return spread((r.tenth_rate(False) / r.tenth_rate(True) for r in both), ratio)


class PerJob(Protocol):
    @property
    def jobs(self) -> int: ...


P = TypeVar("P", bound=PerJob)


def per_job_us(runs: Iterable[P], value: Callable[[P], float]) -> str:
    """``value`` of each run (seconds) per job, in µs."""
    return spread((value(r) / r.jobs * 1e6 for r in runs), fixed(0))


def per_job_count(runs: Iterable[P], value: Callable[[P], float]) -> str:
    """``value`` of each run (a count) per job."""
    return spread((value(r) / r.jobs for r in runs), fixed(2))


class WorkerUsage(PerJob, Protocol):
    @property
    def worker_steady(self) -> procs.TreeUsage: ...


U = TypeVar("U", bound=WorkerUsage)

#: The columns ``usage_cells`` fills.
USAGE_COLUMNS = (
    "worker user µs/job",
    "worker sys µs/job",
    "voluntary ctx switches/job",
    "involuntary ctx switches/job",
)


def usage_cells(runs: Sequence[U]) -> list[str]:
    """Where the workers' steady phase went per job: user and kernel CPU, and thread switches."""
    return [
        per_job_us(runs, lambda r: r.worker_steady.user),
        per_job_us(runs, lambda r: r.worker_steady.system),
        per_job_count(runs, lambda r: r.worker_steady.voluntary),
        per_job_count(runs, lambda r: r.worker_steady.involuntary),
    ]


#: The columns ``cpu_cells`` and ``steady_cells`` fill.
CPU_COLUMNS = ("worker CPU µs/job", "PostgreSQL CPU µs/job")
STEADY_COLUMNS = ("**drain jobs/s steady**", "first ÷ last tenth jobs/s", *CPU_COLUMNS)


def cpu_cells(backend: str, runs: Sequence[DrainRun]) -> list[str]:
    """The worker and PostgreSQL CPU µs/job cells of a drain table's row; the latter is '-' on
    Redis, which has no backends to read."""
    postgres = per_job_us(runs, lambda r: r.postgres_cpu_s) if backend == POSTGRESQL else "-"
    return [per_job_us(runs, lambda r: r.worker_cpu_s), postgres]


def steady_cells(backend: str, runs: Sequence[DrainRun]) -> list[str]:
    """The steady drain rate (bold), first ÷ last tenth, and CPU cells of a drain table's row."""
    return [
        f"**{spread((r.steady_rate for r in runs), rate)}**",
        first_over_last_tenth(runs),
        *cpu_cells(backend, runs),
    ]


def verdict_row(
    what: str,
    wanted: str,
    values: list[float],
    fmt: Callable[[float], str],
    met: Callable[[float], bool],
    unit: str = "",
) -> list[str]:
    """The row of a goal judged on the median of ``values`` (``met`` of it); none without values."""
    if not values:
        return []
    measured = f"{spread(values, fmt)}{unit}"
    return [f"| {what} | {wanted} | {measured} | {verdict(met(statistics.median(values)))} |"]


def at_least(what: str, floor: float, values: list[float]) -> list[str]:
    """The row of a ratio goal met when the median is ``floor`` or more."""
    return verdict_row(what, f"≥ {floor:.2f}x", values, ratio, lambda median: median >= floor)


def at_most(what: str, ceiling: float, values: list[float], digits: int = 2) -> list[str]:
    """The row of a ratio goal met when the median is ``ceiling`` or less."""
    return verdict_row(what, f"≤ {ceiling:.{digits}f}x", values, ratio, lambda median: median <= ceiling)


def below(
    what: str, ceiling: float, values: list[float], fmt: Callable[[float], str], unit: str
) -> list[str]:
    """The row of a goal met when the median, in ``unit``, is under ``ceiling``."""
    return verdict_row(
        what, f"< {ceiling:.0f}{unit}", values, fmt, lambda median: median < ceiling, unit=unit
    )


X = TypeVar("X")


def per_backend(rows: Callable[[X, str], list[str]]) -> Callable[[X], list[str]]:
    """A section's goals: the ``rows`` of each backend, Redis then PostgreSQL."""

    def goals(results: X) -> list[str]:
        return [row for backend in (REDIS, POSTGRESQL) for row in rows(results, backend)]

    return goals


class ReportedResults(DrainResults, Protocol):
    runs: list[tuple[int, Any]]


D = TypeVar("D", bound=ReportedResults)


def _nothing(_: object) -> dict[str, Any]:
    return {}


def _no_notes(_: object) -> Sequence[str]:
    return ()


@dataclass(frozen=True)
class DrainReport(Generic[D]):
    """A drain section's text on stdout (``intro``, ``table``, its goals judged, then what was
    skipped or failed and how long it took); its part of RESULTS.md (``title``, that text,
    ``method`` with ``notes``, its versions); its JSON file (the run's frame, ``extra``, each
    run with ``derived``)."""

    title: str
    topic: str
    json_file: str
    method: str
    #: Formatted with the run's settings and ``quick_sizes``, what a --quick run says of its figures.
    intro: str
    table: Callable[[D], list[str]]
    #: The rows of the section's goals, judged on this run.
    goals: Callable[[D], list[str]]
    #: Figures computed from a run, kept in the JSON beside its fields.
    derived: Callable[[Any], dict[str, Any]]
    extra: Callable[[D], dict[str, Any]] = _nothing
    notes: Callable[[D], Sequence[str]] = _no_notes

    def judged_rows(self, results: D) -> list[str]:
        """The goals' rows, without a verdict on --quick sizes."""
        return judged(self.goals(results), results.settings["quick"])

    def tables(self, results: D) -> str:
        tail = section_tail(results)
        intro = self.intro.format(**results.settings, quick_sizes=quick_note(results.settings))
        return drain_tables(intro, self.table(results), self.judged_rows(results), tail)

    def markdown(self, results: D) -> str:
        return drain_markdown(
            self.title, self.topic, self.tables(results), self.method, results.versions, self.notes(results)
        )

    def raw(self, results: D, machine: dict[str, str]) -> dict[str, Any]:
        runs = [{"rep": rep, **asdict(r), **self.derived(r)} for rep, r in results.runs]
        return drain_raw(results, machine, runs, **self.extra(results))

    def write(self, results: D, machine: dict[str, str], out_dir: Path) -> None:
        """The JSON file, and this section added to (or replaced in) the RESULTS.md in ``out_dir``."""
        write_section(out_dir, self.title, self.markdown(results), self.json_file, self.raw(results, machine))
