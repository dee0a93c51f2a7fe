"""What the flow-control suite reads back from its worker subprocesses: the runs recorded by
tests/jobs/flow_jobs.py, paired into time intervals, and the measures the tests check on them."""

from __future__ import annotations

import subprocess
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from asynctask import Client, Settings, default_registry
from asynctask.api import ProcessSet
from tests.brokers.conftest import ROOT, MakeClient, SpawnWorker
from tests.conftest import wait_until
from tests.records import written_lines

FLOW_JOBS = ROOT / "tests" / "jobs" / "flow_jobs.py"


@dataclass(frozen=True)
class Event:
    """One line of the runs file."""

    event: str
    jid: str
    pid: int
    at: float
    key: str
    seq: int
    retry_count: int


@dataclass(frozen=True)
class Interval:
    """One run of a job: from its start to its end (``done`` or ``fail``); ``end`` is None for a
    run that never ended (its process was killed)."""

    jid: str
    key: str
    seq: int
    start: float
    end: float | None
    outcome: str | None


def read_events(path: Path) -> list[Event]:
    events = []
    for line in written_lines(path):
        event, jid, pid, at, key, seq, count = line.split()
        events.append(Event(event, jid, int(pid), float(at), key, int(seq), int(count)))
    return sorted(events, key=lambda e: e.at)


def intervals(events: Iterable[Event]) -> list[Interval]:
    """Every run, in order of start; a start followed by another start of its job was cut short."""
    open_runs: dict[str, Event] = {}
    runs: list[Interval] = []
    for e in sorted(events, key=lambda e: e.at):
        if e.event == "start":
            if (cut := open_runs.pop(e.jid, None)) is not None:
                runs.append(Interval(cut.jid, cut.key, cut.seq, cut.at, None, None))
            open_runs[e.jid] = e
        elif (begun := open_runs.pop(e.jid, None)) is not None:
            runs.append(Interval(e.jid, e.key, e.seq, begun.at, e.at, e.event))
    runs += [Interval(s.jid, s.key, s.seq, s.at, None, None) for s in open_runs.values()]
    return sorted(runs, key=lambda r: r.start)


def by_key(runs: Iterable[Interval]) -> dict[str, list[Interval]]:
    keyed: dict[str, list[Interval]] = defaultdict(list)
    for run in runs:
        keyed[run.key].append(run)
    return {key: sorted(found, key=lambda r: r.start) for key, found in keyed.items()}


def done_jids(path: Path) -> set[str]:
    return {e.jid for e in read_events(path) if e.event == "done"}


def max_overlap(runs: Iterable[Interval], open_until: float | None = None) -> int:
    """The most runs in progress at one instant; a run that never ended lasts until ``open_until``."""
    edges: list[tuple[float, int]] = []
    for run in runs:
        end = run.end if run.end is not None else open_until
        if end is None:
            raise AssertionError(f"run of {run.jid} never ended")
        # At equal times the end sorts first: a job that starts as another ends does not overlap it.
        edges += [(run.start, 1), (end, -1)]
    running = most = 0
    for _, step in sorted(edges):
        running += step
        most = max(most, running)
    return most


def mean_keys_running(runs: Iterable[Interval]) -> float:
    """The time-weighted average number of distinct keys with a run in progress, from the first
    start to the last end."""
    edges: list[tuple[float, int, str]] = []
    for run in runs:
        assert run.end is not None, f"run of {run.jid} never ended"
        edges += [(run.start, 1, run.key), (run.end, -1, run.key)]
    edges.sort()
    running: dict[str, int] = defaultdict(int)
    area = 0.0
    for (at, step, key), (following, _, _) in zip(edges, [*edges[1:], edges[-1]], strict=True):
        running[key] += step
        if running[key] == 0:
            del running[key]
        area += len(running) * (following - at)
    return area / (edges[-1][0] - edges[0][0])


def most_in_window(times: Iterable[float], window: float) -> int:
    """The most of ``times`` inside any half-open interval of length ``window`` (sliding: every
    starting point, not aligned buckets)."""
    ordered = sorted(times)
    most = first = 0
    for last, at in enumerate(ordered):
        while ordered[first] <= at - window:
            first += 1
        most = max(most, last - first + 1)
    return most


def flow_client(make_client: MakeClient) -> Client:
    """A client knowing tests/jobs/flow_jobs.py's definitions (the default registry, where
    importing it put them): a key template names the job's arguments, which the client binds
    with the signature of the definition it knows by the job's name."""
    return make_client(registry=default_registry)


def start_flow_workers(
    spawn_worker: SpawnWorker, settings: Settings, processes: int, concurrency: int, **extra: str
) -> list[subprocess.Popen[bytes]]:
    """``processes`` workers running tests/jobs/flow_jobs.py (with ``extra`` environment
    variables), once all of them are fetching."""
    workers = [spawn_worker(concurrency=concurrency, jobs=FLOW_JOBS, **extra) for _ in range(processes)]
    live = ProcessSet(settings=settings)
    wait_until(lambda: live.size == processes, timeout=30)
    return workers
