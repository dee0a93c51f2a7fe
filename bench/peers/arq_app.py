"""arq side of the redis section: ``python bench/peers/arq_app.py C`` runs one arq worker, ``max_jobs=C``.

Runs in arq's own virtualenv only (``bench/runtime/redis_peers.py``). The worker is what ``arq
arq_app.WorkerSettings`` starts (``run_worker``, arq's own entry point), with two differences
the CLI cannot express: ``max_jobs`` comes from the command line, and arq's default log
configuration is set to WARNING instead of INFO, at which arq logs two lines per job.

The two functions are coroutines, arq's only kind. The no-op appends one byte to the O_APPEND
file named by ``BENCH_MARKER`` (workers only), the latency job one 16-byte record (ms from
enqueue to start), exactly like AsyncTask's ``bench/core/noop_jobs.py``.
"""

from __future__ import annotations

import logging.config
import os
import sys
import time
from typing import Any

import marker  # type: ignore[import-not-found]  # beside this file, on PYTHONPATH
from arq.connections import RedisSettings  # type: ignore[import-not-found]  # in arq's venv only
from arq.logs import default_log_config  # type: ignore[import-not-found]
from arq.worker import run_worker  # type: ignore[import-not-found]


async def noop(ctx: dict[str, Any]) -> None:
    os.write(marker.FD, b".")


async def latency(ctx: dict[str, Any], sent: float) -> None:
    os.write(marker.FD, b"%15.6f\n" % ((time.time() - sent) * 1000))


class WorkerSettings:
    """arq's defaults otherwise: queue ``arq:queue``, poll_delay 0.5 s, results kept 3600 s."""

    functions = (noop, latency)
    redis_settings = RedisSettings.from_dsn(os.environ["BENCH_REDIS_URL"])


def main(argv: list[str]) -> int:
    config: dict[str, Any] = default_log_config(verbose=False)
    config["handlers"]["arq.standard"]["level"] = config["loggers"]["arq"]["level"] = "WARNING"
    logging.config.dictConfig(config)
    run_worker(WorkerSettings, max_jobs=int(argv[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
