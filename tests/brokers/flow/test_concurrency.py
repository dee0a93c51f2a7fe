"""Concurrency keys on every backend, with worker subprocesses: at most ``concurrency_limit``
jobs of a key at once, a key's jobs in push order, many keys side by side, order kept across a
kill -9 and across failures, and jobs without a key never held up by a busy one."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from asynctask import Client, Settings
from tests.brokers.conftest import MakeClient, SpawnWorker
from tests.brokers.flow.support import (
    Interval,
    by_key,
    done_jids,
    flow_client,
    intervals,
    max_overlap,
    mean_keys_running,
    read_events,
    start_flow_workers,
)
from tests.conftest import wait_until
from tests.jobs.flow_jobs import lane_step, plain_step

# Times what it checks: runs alone (see the marker in pyproject.toml).
pytestmark = pytest.mark.alone


def key_major(keys: int, per_key: int, seconds: float) -> list[list[object]]:
    """Every job of the first key, then of the second, ...: without lanes, a worker's threads
    would all take the first key's jobs at once."""
    return [[f"k{key}", seq, seconds] for key in range(keys) for seq in range(per_key)]


def assert_serial_in_push_order(runs: list[Interval], per_key: int, open_until: float | None = None) -> None:
    """One key's runs (by start): its jobs' seqs in push order (a run again only right after its
    own cut-short run), each starting after the previous run ended."""
    seqs = [run.seq for run in runs]
    assert seqs == sorted(seqs) and set(seqs) == set(range(per_key)), seqs
    for before, after in itertools.pairwise(runs):
        end = before.end if before.end is not None else open_until
        assert end is not None and after.start >= end, (before, after)


KEYS = 50
PER_KEY = 40
STEP_SECONDS = 0.02
#: The time-weighted average of distinct keys running, at least. Limit 1: 20 threads could run
#: 20 keys. Limit 3: pushed key by key, a key's runnable jobs sit side by side in the queue
#: and threads take them together, so 20 threads fill up with 7 keys; 5 on average is still
#: many lanes at once, where a broker running one key at a time would show 1.
MIN_KEYS_RUNNING = {1: 8, 3: 5}


@pytest.mark.parametrize("limit", [1, 3])
def test_a_key_never_runs_more_than_its_limit_while_many_keys_run_side_by_side(
    limit: int, make_client: MakeClient, settings: Settings, spawn_worker: SpawnWorker, runs_file: Path
) -> None:
    client = flow_client(make_client)
    start_flow_workers(spawn_worker, settings, processes=2, concurrency=10)
    jids = lane_step.set(client=client, concurrency_limit=limit).perform_bulk(
        key_major(KEYS, PER_KEY, STEP_SECONDS)
    )
    assert len(set(jids)) == KEYS * PER_KEY
    wait_until(lambda: done_jids(runs_file) >= set(jids), timeout=120, interval=0.2)

    runs = intervals(read_events(runs_file))
    assert sorted(run.jid for run in runs) == sorted(jids), "a job ran twice or not at all"
    keyed = by_key(runs)
    assert len(keyed) == KEYS
    if limit == 1:
        for runs_of_key in keyed.values():
            assert_serial_in_push_order(runs_of_key, PER_KEY)
    else:
        overlaps = [max_overlap(runs_of_key) for runs_of_key in keyed.values()]
        # The limit is reached (pushed key by key, a key's first jobs are runnable together)...
        assert max(overlaps) == limit, overlaps
        # ... and never exceeded.
        assert all(found <= limit for found in overlaps), overlaps
    # 20 threads share the keys: a lane does not hold up the others.
    assert mean_keys_running(runs) >= MIN_KEYS_RUNNING[limit]


CRASH_KEYS = 10
CRASH_PER_KEY = 8
#: Long enough that a kill finds several keys' jobs running.
CRASH_STEP_SECONDS = 0.2


def test_order_and_every_job_survive_a_killed_worker_holding_keys(
    make_client: MakeClient, settings: Settings, spawn_worker: SpawnWorker, runs_file: Path
) -> None:
    client = flow_client(make_client)
    started = start_flow_workers(spawn_worker, settings, processes=2, concurrency=5)
    workers = {worker.pid: worker for worker in started}
    jids = lane_step.set(client=client).perform_bulk(key_major(CRASH_KEYS, CRASH_PER_KEY, CRASH_STEP_SECONDS))

    def mid_job() -> subprocess.Popen[bytes] | None:
        """Once some jobs are done, a process that started a job less than half a job ago:
        the kill, a moment later, finds it running. Either process: one of them may have
        claimed every key's first job, and then the other has nothing to cut short."""
        events = read_events(runs_file)
        done = {e.jid for e in events if e.event == "done"}
        recent = time.time() - CRASH_STEP_SECONDS / 2
        if len(done) < 10:
            return None
        for e in events:
            if e.event == "start" and e.pid in workers and e.jid not in done and e.at > recent:
                return workers[e.pid]
        return None

    doomed = wait_until(mid_job, timeout=30, interval=0.01)
    # The whole process group: the worker and its watchdog (which would give the jobs back at once).
    os.killpg(doomed.pid, signal.SIGKILL)
    doomed.wait(10)
    killed_at = time.time()
    before = read_events(runs_file)
    cut_short = {e.jid for e in before if e.event == "start" and e.pid == doomed.pid} - {
        e.jid for e in before if e.event == "done"
    }
    assert cut_short, "the kill found no job running: it tested nothing"

    wait_until(lambda: done_jids(runs_file) >= set(jids), timeout=60, interval=0.1)
    runs = intervals(read_events(runs_file))
    assert {run.jid for run in runs if run.end is None} == cut_short
    assert {run.jid for run in runs} == set(jids)
    keyed = by_key(runs)
    assert len(keyed) == CRASH_KEYS
    for runs_of_key in keyed.values():
        assert_serial_in_push_order(runs_of_key, CRASH_PER_KEY, open_until=killed_at)


FAILING_SEQ = 1
FAILURES = 2


def runs_of_a_key_with_a_failing_job(
    on_failure: str | None, client: Client, settings: Settings, spawn_worker: SpawnWorker, runs_file: Path
) -> tuple[list[Interval], list[Interval]]:
    """Five jobs of one key, the second failing twice before it succeeds: all runs of the key,
    and the failing job's."""
    start_flow_workers(spawn_worker, settings, processes=1, concurrency=4)
    options = {} if on_failure is None else {"concurrency_on_failure": on_failure}
    args = [["f", seq, 0.1, FAILURES if seq == FAILING_SEQ else 0] for seq in range(5)]
    jids = lane_step.set(client=client, **options).perform_bulk(args)
    wait_until(lambda: done_jids(runs_file) >= set(jids), timeout=30, interval=0.1)
    runs = intervals(read_events(runs_file))
    failing = [run for run in runs if run.seq == FAILING_SEQ]
    assert [run.outcome for run in failing] == ["fail", "fail", "done"]
    return runs, failing


def test_a_failing_job_holds_its_key_until_it_succeeds(
    make_client: MakeClient, settings: Settings, spawn_worker: SpawnWorker, runs_file: Path
) -> None:
    client = flow_client(make_client)
    runs, failing = runs_of_a_key_with_a_failing_job(None, client, settings, spawn_worker, runs_file)
    succeeded = failing[-1]
    assert succeeded.end is not None
    assert all(run.start >= succeeded.end for run in runs if run.seq > FAILING_SEQ)
    assert [run.seq for run in runs] == [0, 1, 1, 1, 2, 3, 4]
    assert max_overlap(runs) == 1


def test_with_on_failure_continue_later_jobs_go_on_while_a_failed_one_waits(
    make_client: MakeClient, settings: Settings, spawn_worker: SpawnWorker, runs_file: Path
) -> None:
    client = flow_client(make_client)
    runs, failing = runs_of_a_key_with_a_failing_job("continue", client, settings, spawn_worker, runs_file)
    [next_job] = [run for run in runs if run.seq == FAILING_SEQ + 1]
    assert failing[0].end is not None and next_job.start >= failing[0].end
    assert next_job.start < failing[1].start
    # Still one job of the key at a time.
    assert max_overlap(runs) == 1


#: Far longer than the unkeyed jobs' 20 x 10 ms, so that a loaded machine's slower thread
#: still runs them all meanwhile (1.5 s once fell short on CI).
HOT_SECONDS = 3.0


def test_jobs_without_a_key_are_not_held_up_by_a_busy_key(
    make_client: MakeClient, settings: Settings, spawn_worker: SpawnWorker, runs_file: Path
) -> None:
    client = flow_client(make_client)
    start_flow_workers(spawn_worker, settings, processes=1, concurrency=2)
    hot = lane_step.set(client=client).perform_bulk([["hot", seq, HOT_SECONDS] for seq in range(3)])
    plain = plain_step.set(client=client).perform_bulk([["plain", seq, 0.01] for seq in range(20)])
    wait_until(lambda: done_jids(runs_file) >= set(plain), timeout=30, interval=0.05)
    runs = intervals(read_events(runs_file))
    [first_hot] = [run for run in runs if run.jid == hot[0]]
    # One thread runs the hot key's first job; the other runs every unkeyed job meanwhile.
    if first_hot.end is not None:
        late = [run for run in runs if run.key == "plain" and (run.end is None or run.end >= first_hot.end)]
        assert not late, (first_hot, late)
    assert [run.jid for run in runs if run.key == "hot"] == [hot[0]]
