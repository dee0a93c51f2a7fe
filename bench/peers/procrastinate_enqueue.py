"""``python bench/peers/procrastinate_enqueue.py N BATCH``: ``batch_defer`` N no-op jobs, BATCH
per call (one INSERT of BATCH rows each); prints ``{"jobs", "seconds"}``."""

from __future__ import annotations

import json
import sys
import time

from procrastinate_app import app, noop  # type: ignore[import-not-found]  # on PYTHONPATH in the peers' venv


def main(argv: list[str]) -> int:
    count, batch = int(argv[0]), int(argv[1])
    with app.open():
        app.check_connection()  # connect before the clock
        start = time.perf_counter()
        for first in range(0, count, batch):
            noop.batch_defer(*({} for _ in range(min(batch, count - first))))
        seconds = time.perf_counter() - start
    print(json.dumps({"jobs": count, "seconds": seconds}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
