"""BullMQ under test (Node): ``Queue.addBulk``/``Queue.add`` to enqueue, ``Worker`` to process.

Its scripts are in ``bench/peers/bullmq/``; the exact packages of its ``package-lock.json`` are
installed by ``ensure`` with ``npm ci`` into ``bench/.bullmq`` (git-ignored), again whenever the
lock file changes, and found there through ``NODE_PATH``.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import time
from pathlib import Path

import redis

from bench.core.system import ROOT, System, clean_env, marker_env

SCRIPTS = ROOT / "bench" / "peers" / "bullmq"
LOCK = SCRIPTS / "package-lock.json"
#: Where ``npm ci`` installs the lock file's packages.
MODULES = ROOT / "bench" / ".bullmq"
#: Jobs per ``addBulk`` call (the runner passes its own; this is for describe()).
BATCH = 1000


def available() -> bool:
    """Whether ``node`` and ``npm`` are on PATH (a machine without Node skips BullMQ)."""
    return shutil.which("node") is not None and shutil.which("npm") is not None


def ensure() -> float:
    """Install the lock file's packages unless they are installed already; return the seconds
    it took. Raises ``RuntimeError`` with npm's output when the install fails."""
    stamp = MODULES / "bench-package-lock.json"
    wanted = LOCK.read_text(encoding="utf-8")
    if stamp.exists() and stamp.read_text(encoding="utf-8") == wanted:
        return 0.0
    start = time.monotonic()
    shutil.rmtree(MODULES, ignore_errors=True)
    MODULES.mkdir(parents=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(SCRIPTS / name, MODULES / name)
    # No install scripts: msgpackr's optional native build falls back to its JavaScript.
    argv = ["npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error"]
    out = subprocess.run(argv, cwd=MODULES, capture_output=True, text=True, timeout=600, env=clean_env())
    if out.returncode != 0:
        raise RuntimeError(f"npm ci failed ({out.returncode}): {out.stderr.strip()[-1500:]}")
    # Written last: an interrupted install is redone next time.
    stamp.write_text(wanted, encoding="utf-8")
    return time.monotonic() - start


class BullMQ(System):
    name = "BullMQ"

    def enqueue_argv(self, url: str, mode: str, jobs: int, batch: int) -> list[str]:
        return ["node", str(SCRIPTS / "enqueue.cjs"), mode, str(jobs), str(batch)]

    def latency_argv(self, url: str, jobs: int, rate: float) -> list[str]:
        return ["node", str(SCRIPTS / "enqueue.cjs"), "latency", str(jobs), f"{rate:g}"]

    def worker_argv(self, concurrency: int) -> list[str]:
        return ["node", str(SCRIPTS / "worker.cjs"), str(concurrency)]

    def env(self, url: str, marker: Path | None) -> dict[str, str]:
        return clean_env(BENCH_REDIS_URL=url, NODE_PATH=str(MODULES / "node_modules"), **marker_env(marker))

    def queued(self, conn: redis.Redis) -> int:
        """Jobs waiting in BullMQ's ``bull:default:wait`` list."""
        return int(conn.llen("bull:default:wait"))

    def versions(self) -> dict[str, str]:
        return _versions()

    def describe(self) -> list[str]:
        return [
            f"enqueue: `queue.addBulk` with {BATCH} jobs per call; single: `await queue.add('noop', {{}})` "
            "in a loop; latency: `queue.add('latency', {sent})`, one call per job at the paced times "
            "(`bench/peers/bullmq/enqueue.cjs`)",
            "worker: `node bench/peers/bullmq/worker.cjs C`: one `Worker` on the queue `default` with "
            "`concurrency: C`, in one Node process",
            "jobs added with `removeOnComplete: true`: a finished job is deleted, as Sidekiq and AsyncTask "
            "keep nothing of one (BullMQ's default keeps every finished job's hash)",
            "defaults otherwise: a job lock renewed every 15 s (`lockDuration` 30 s), stalled-job check "
            "every 30 s, no rate limiter, ioredis 5 (pure JavaScript)",
        ]


@functools.cache
def _versions() -> dict[str, str]:
    """Node, BullMQ and ioredis, as the worker loads them."""
    script = (
        'const v = (p) => require(p + "/package.json").version; '
        "console.log(JSON.stringify("
        '{node: process.versions.node, bullmq: v("bullmq"), ioredis: v("ioredis")}))'
    )
    try:
        out = subprocess.run(
            ["node", "-e", script],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
            env=SYSTEM.env("", None),
        )
    except (OSError, subprocess.SubprocessError):
        return {}
    found: dict[str, str] = json.loads(out.stdout)
    return found


SYSTEM = BullMQ()
