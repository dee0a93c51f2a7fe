"""The steady pace of every latency enqueuer, AsyncTask's and the Python peers' alike.

Dependency-free, so that both the project's interpreter (``bench.peers.pacing``) and the
peers' venvs (``pacing``, with ``bench/peers`` on the path) import the same code.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def paced(count: int, rate: float, send: Callable[[], object]) -> None:
    """Call ``send`` ``count`` times, the i-th at start + i/rate.

    The schedule is fixed from the start and no send goes before its time: one that is late
    (the process was descheduled) goes at once, so after a stall the jobs due during it go
    back to back, then the pace resumes.
    """
    start = time.perf_counter()
    for i in range(count):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        send()
