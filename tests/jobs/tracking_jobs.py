"""Jobs for the mixed 1,000-job tracking test, loaded by a worker subprocess with ``-r``.

Each job gets a chunk of one item ``{"i": n, "kind": k}``. ``slow`` items block while the
file named by ``TRACKING_TEST_HOLD`` exists, so that the test can interrupt them with TERM.
"""

from __future__ import annotations

import os
import random
import time
from typing import Any

from asynctask import JobFailed, current_job, job

HOLD = os.environ.get("TRACKING_TEST_HOLD", "")


@job(retry=1)
def mixed(items: list[dict[str, Any]]) -> None:
    item = items[0]
    kind, number = item["kind"], item["i"]
    first_run = current_job().retry_count is None
    if kind == "business":
        raise JobFailed(f"seller {number} does not qualify")
    if kind == "flaky" and first_run:
        raise RuntimeError(f"flaky {number}")
    if kind == "dead":
        raise ValueError(f"broken {number}")
    if kind == "slow":
        while HOLD and os.path.exists(HOLD):
            time.sleep(0.05)


@mixed.retry_in
def _soon(count: int, exc: BaseException, job: dict[str, Any]) -> float:
    # Sidekiq adds up to 9 s of jitter to any delay; keep the base tiny so retries come fast.
    return 0.01 + random.random() / 100
