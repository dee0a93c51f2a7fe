"""``python bench/peers/huey_enqueue.py N``: enqueue N no-op Huey tasks, print ``{"jobs", "seconds"}``.

Huey has no bulk enqueue: each call of the task is one INSERT in its own transaction.
"""

from __future__ import annotations

import json
import sys
import time

from huey_app import huey, noop  # type: ignore[import-not-found]  # on PYTHONPATH in the peers' venv


def main(argv: list[str]) -> int:
    count = int(argv[0])
    huey.storage.queue_size()  # opens the connection (and creates the tables) before the clock
    start = time.perf_counter()
    for _ in range(count):
        noop()
    seconds = time.perf_counter() - start
    print(json.dumps({"jobs": count, "seconds": seconds}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
