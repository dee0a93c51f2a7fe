"""Rate limits on every backend: a sliding window across worker processes, with the jobs over
the limit postponed, never failed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from asynctask import Settings
from asynctask.job import JobDefinition
from tests.brokers.conftest import MakeClient, SpawnWorker
from tests.brokers.flow.support import done_jids, flow_client, most_in_window, read_events, start_flow_workers
from tests.conftest import wait_until
from tests.jobs.flow_jobs import RATE_PER_SECOND, async_rate_step, rate_step

# Times what it checks: runs alone (see the marker in pyproject.toml).
pytestmark = pytest.mark.alone

JOBS = 100
#: A job records its start a few milliseconds after its claim, which is what the limit
#: counts; the windows checked are shorter by that much. A fixed-window counter still shows:
#: it lets twice the limit start around each boundary.
RECORDING_SLACK = 0.05


@pytest.mark.parametrize("step", [rate_step, async_rate_step], ids=["sync", "async"])
def test_no_window_of_a_second_holds_more_starts_than_the_limit(
    step: JobDefinition[Any],
    make_client: MakeClient,
    settings: Settings,
    spawn_worker: SpawnWorker,
    runs_file: Path,
) -> None:
    client = flow_client(make_client)
    start_flow_workers(spawn_worker, settings, processes=2, concurrency=10)
    jids = step.set(client=client).perform_bulk([["rate", seq, 0.0] for seq in range(JOBS)])
    # The limit makes the run last JOBS / RATE_PER_SECOND seconds at least.
    wait_until(lambda: done_jids(runs_file) >= set(jids), timeout=60, interval=0.2)

    events = read_events(runs_file)
    starts = [e for e in events if e.event == "start"]
    assert sorted(e.jid for e in starts) == sorted(jids), "a job ran twice or not at all"
    assert most_in_window([e.at for e in starts], 1.0 - RECORDING_SLACK) <= RATE_PER_SECOND
    # Postponed, not failed: no job ran as a retry, and none failed.
    assert {e.retry_count for e in events} == {-1}
    assert {e.event for e in events} == {"start", "done"}
    # Both processes took part: the window is shared, not per process.
    assert len({e.pid for e in starts}) == 2
