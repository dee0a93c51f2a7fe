"""Jobs of the dashboard's browser test (tests/webapi/test_dashboard_browser.py), loaded with
``-r`` by its workers and API server, and imported by the test to push them.

The test decides when a job may go on or succeed by creating a file (a "gate"): what runs,
fails or waits never depends on how fast a loaded machine is.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from asynctask import JobFailed, job, payload, periodic

#: Longest a job waits for its gate, so that a test that died leaves no thread waiting for long.
GATE_LIMIT = 120.0


def _wait_for(gate: str) -> None:
    deadline = time.monotonic() + GATE_LIMIT
    while not Path(gate).exists() and time.monotonic() < deadline:
        time.sleep(0.05)


@job
def dashboard_touch(marker: str) -> None:
    """Leave ``marker``: the proof that the job ran."""
    Path(marker).touch()


@job
def dashboard_hold(note: str, gate: str) -> None:
    """Keep a thread busy until ``gate`` exists."""
    _wait_for(gate)


@job(retry=3)
def dashboard_fragile(note: str, gate: str) -> None:
    """Fail with ``note`` in the error message until ``gate`` exists; then succeed, and leave
    ``<gate>.ran``."""
    if not Path(gate).exists():
        raise RuntimeError(f"refused {note}")
    Path(f"{gate}.ran").touch()


@dashboard_fragile.retry_in
def _not_during_the_test(count: int, exc: BaseException, job: payload.JobDict) -> float:
    # The retry poller must not take an entry while the page acts on it.
    return 3600.0


@job(api=True)
def dashboard_import(items: list[dict[str, Any]]) -> None:
    """Import items; an item with ``bad`` fails the chunk with its name in the message, one
    with ``gate`` waits for that file first."""
    for item in items:
        if "gate" in item:
            _wait_for(item["gate"])
        if item.get("bad"):
            raise JobFailed(f"cannot import {item['name']}")


@periodic(cron="0 3 1 1 *", tz="UTC")
@job
def dashboard_yearly() -> None:
    """A schedule for the periodic page to list and pause (its tick is a year apart)."""
