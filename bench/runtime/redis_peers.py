"""The Python peers on Redis and exactly how each is run: Celery, RQ (two workers), Dramatiq, arq, Huey.

All run from the peers' virtualenv (``bench/core/peers_venv.py``) except arq: arq 0.28.0 requires
redis-py < 6 and kombu 5.7 (Celery's Redis transport) redis-py >= 6.4, so arq has a venv of
its own, made by ``ensure`` inside the peers' one (so that it is git-ignored and rebuilt with it).
Every worker command starts one worker with the requested number of job slots (RQ: one);
each job is the bench's no-op or latency job, in ``bench/peers/``.
"""

from __future__ import annotations

import functools
from pathlib import Path

import redis

from bench.core import peers_venv
from bench.core.system import System, marker_env

ENQUEUE = peers_venv.PEERS_DIR / "redis_enqueue.py"
#: arq's venv, inside the peers' one: ``peers_venv.ensure`` clears it whenever it rebuilds.
ARQ_VENV = peers_venv.VENV / "arq"
#: arq's newest release, with the newest redis-py it accepts and the project's hiredis.
ARQ_REQUIREMENTS = ("arq==0.28.0", "redis[hiredis]==5.3.1", "hiredis==3.5.0")
#: Jobs per bulk call where a peer has one (the runner passes its own; this is for describe()).
BATCH = 1000
#: Caps of N (``System.max_jobs``) for the peers that would need minutes for the common
#: 20,000 jobs: about 10 s of draining each at the rate measured here with one process (2 cores,
#: other benches running): RQ's default worker 30-60 jobs/s (a fork per job), RQ's SimpleWorker
#: 250-400 jobs/s, arq 200 jobs/s at C=10 (its poll: at most max(5·C, 100) jobs per 0.5 s).
RQ_FORK_MAX_JOBS = 500
RQ_SIMPLE_MAX_JOBS = 3000
ARQ_MAX_JOBS = 2000
#: Said of every peer: its jobs do what every system's do.
_JOBS = "jobs `noop()` and `latency(sent)`, the bench's marker writes"


def arq_python() -> Path:
    return ARQ_VENV / "bin" / "python"


def ensure() -> float:
    """Build or refresh the peers' venv, then arq's; return the seconds it took.

    Raises ``RuntimeError`` with pip's output when an install fails.
    """
    # The peers' venv first: rebuilding it clears arq's, which lives inside it.
    seconds = peers_venv.ensure()
    return seconds + peers_venv.build(ARQ_VENV, "\n".join(ARQ_REQUIREMENTS) + "\n", list(ARQ_REQUIREMENTS))


@functools.cache
def _peers_versions() -> dict[str, str]:
    return peers_venv.versions(("celery", "kombu", "rq", "dramatiq", "huey", "redis", "hiredis"))


@functools.cache
def _arq_versions() -> dict[str, str]:
    found = peers_venv.versions(("arq", "redis", "hiredis"), arq_python())
    return {
        "arq": found["arq"],
        "python (arq's venv)": found["python"],
        "redis-py (arq's venv)": found["redis"],
        "hiredis (arq's venv)": found["hiredis"],
    }


#: Variables the peers read as settings (``CELERY_BROKER_URL`` wins over the app's broker,
#: ``RQ_WORKER_CLASS``, ``dramatiq_queue_prefetch``...): none may come from the caller.
_PEER_PREFIXES = ("celery_", "rq_", "dramatiq_", "huey_", "arq_")


class _Peer(System):
    """A peer whose enqueue and latency commands are ``redis_enqueue.py`` run as ``peer`` by
    ``python()``, all in the environment ``env`` makes."""

    #: What ``redis_enqueue.py`` calls it.
    peer: str
    #: Its packages in the peers' venv, whose versions RESULTS.md shows.
    packages: tuple[str, ...]
    #: The Redis list its jobs wait in.
    queue_key: str

    def python(self) -> Path:
        return peers_venv.python()

    def enqueue_argv(self, url: str, mode: str, jobs: int, batch: int) -> list[str]:
        return [str(self.python()), str(ENQUEUE), self.peer, url, mode, str(jobs), str(batch)]

    def latency_argv(self, url: str, jobs: int, rate: float) -> list[str]:
        return [str(self.python()), str(ENQUEUE), self.peer, url, "latency", str(jobs), f"{rate:g}"]

    def env(self, url: str, marker: Path | None) -> dict[str, str]:
        """The app modules read ``BENCH_REDIS_URL``; RQ's CLI reads ``RQ_REDIS_URL``."""
        found = {
            key: value
            for key, value in peers_venv.env().items()
            if not key.lower().startswith(_PEER_PREFIXES)
        }
        found.update(BENCH_REDIS_URL=url, RQ_REDIS_URL=url, **marker_env(marker))
        return found

    def versions(self) -> dict[str, str]:
        """Versions of its packages and of the interpreter and Redis client they run on."""
        found = _peers_versions()
        return {
            **{package: found[package] for package in self.packages},
            "python (peers' venv)": found["python"],
            "redis-py (peers' venv)": found["redis"],
            "hiredis (peers' venv)": found["hiredis"],
        }

    def queued(self, conn: redis.Redis) -> int:
        return int(conn.llen(self.queue_key))


# --- Celery ----------------------------------------------------------------------------------


class _Celery(_Peer):
    name = "Celery"
    peer = "celery"
    packages = ("celery", "kombu")
    queue_key = "default"

    def worker_argv(self, concurrency: int) -> list[str]:
        return [
            str(peers_venv.bin_path("celery")), "-A", "celery_app", "worker",
            "-P", "threads", "-c", str(concurrency), "-Q", "default",
        ]  # fmt: skip

    def describe(self) -> list[str]:
        return [
            '`Celery("celery_app", broker=URL)` with `task_default_queue = "default"` '
            f"(`bench/peers/celery_app.py`); {_JOBS}",
            "enqueue: Celery has no bulk publish (a `group` publishes one message per task): "
            "`noop.delay()` per job, on the default producer pool (one LPUSH each)",
            "worker: `celery -A celery_app worker -P threads -c C -Q default`: one process, C threads "
            "(Celery's default pool, prefork, would be C processes); log level WARNING, Celery's default "
            "(no per-task line)",
            "defaults otherwise: early ack (`acks_late` off: acked just before the task runs), prefetch "
            "multiplier 4 (up to 4·C reserved messages), no result backend, mingle and gossip on; "
            "BRPOP per message, ~9 Redis commands per job; redis-py with hiredis",
        ]


# --- RQ --------------------------------------------------------------------------------------


class _RQ(_Peer):
    """One RQ worker: one job at a time, whatever the concurrency asked; RQ's default ``Worker``,
    or ``simple``: its ``SimpleWorker``."""

    peer = "rq"
    packages = ("rq",)
    queue_key = "rq:queue:default"

    def __init__(self, simple: bool) -> None:
        self.simple = simple
        self.name = "RQ SimpleWorker" if simple else "RQ"
        self.max_jobs = RQ_SIMPLE_MAX_JOBS if simple else RQ_FORK_MAX_JOBS

    def worker_argv(self, concurrency: int) -> list[str]:
        pick = ["-w", "rq.worker.SimpleWorker"] if self.simple else []
        return [str(peers_venv.bin_path("rq")), "worker", "--quiet", *pick, "default"]

    def describe(self) -> list[str]:
        if self.simple:
            worker = (
                "worker: `rq worker --quiet -w rq.worker.SimpleWorker default`: runs each job in the "
                f"worker process itself; N capped at {RQ_SIMPLE_MAX_JOBS}: 250-400 jobs/s here, the "
                "common N would take over a minute"
            )
        else:
            worker = (
                "worker: `rq worker --quiet default`, RQ's default `Worker`: forks a work horse per "
                "job, which imports `rq_jobs` (and so opens the marker) anew each time; "
                f"N capped at {RQ_FORK_MAX_JOBS}: 30-60 jobs/s here, the common N would take minutes"
            )
        return [
            f"`rq_jobs.noop` / `rq_jobs.latency` (`bench/peers/rq_jobs.py`); {_JOBS}",
            f"enqueue: `Queue.enqueue_many([Queue.prepare_data(noop), ...], pipeline=pipe)` with "
            f"{BATCH} jobs per pipeline; single: `queue.enqueue(noop)`",
            worker,
            "one job at a time per process: RQ has no concurrency setting, so C is ignored "
            "(concurrency 1 in every table); `--quiet` = WARNING, as RQ logs each job at INFO",
            "defaults otherwise: `RQ_REDIS_URL` set, results kept 500 s, job timeout 180 s, BLMOVE "
            "dequeue, ~58 Redis commands per job (the default Worker's horse also opens its own "
            "connection), redis-py with hiredis",
        ]


# --- Dramatiq --------------------------------------------------------------------------------


class _Dramatiq(_Peer):
    name = "Dramatiq"
    peer = "dramatiq"
    packages = ("dramatiq",)
    queue_key = "dramatiq:default"

    def worker_argv(self, concurrency: int) -> list[str]:
        return [
            str(peers_venv.bin_path("dramatiq")), "dramatiq_app",
            "--processes", "1", "--threads", str(concurrency),
        ]  # fmt: skip

    def describe(self) -> list[str]:
        return [
            f"`RedisBroker(url=URL)`, actors on queue `default` (`bench/peers/dramatiq_app.py`); {_JOBS}",
            "enqueue: Dramatiq has no bulk enqueue (a `group` sends one message per job): "
            "`noop.send()` per job (one EVALSHA of its dispatch script each)",
            "worker: `dramatiq dramatiq_app --processes 1 --threads C`: one worker process with C "
            "threads, under Dramatiq's supervisor process; log level INFO, Dramatiq's default "
            "(it logs nothing per message at INFO)",
            "defaults otherwise: default middleware (age and time limits, retries, callbacks, "
            "pipelines, shutdown notifications), prefetch 2·C, empty-queue polling with backoff "
            "up to 1 s, no result backend, redis-py with hiredis",
        ]


# --- arq -------------------------------------------------------------------------------------


class _Arq(_Peer):
    """From arq's own venv, whose job queue is a sorted set."""

    name = "arq"
    peer = "arq"
    max_jobs = ARQ_MAX_JOBS

    def python(self) -> Path:
        return arq_python()

    def worker_argv(self, concurrency: int) -> list[str]:
        return [str(arq_python()), str(peers_venv.PEERS_DIR / "arq_app.py"), str(concurrency)]

    def versions(self) -> dict[str, str]:
        return _arq_versions()

    def queued(self, conn: redis.Redis) -> int:
        """Jobs waiting in arq's sorted set ``arq:queue`` (a job leaves it when it ends)."""
        return int(conn.zcard("arq:queue"))

    def describe(self) -> list[str]:
        return [
            "coroutines `noop(ctx)` and `latency(ctx, sent)` (`bench/peers/arq_app.py`), arq's default "
            "queue (sorted set `arq:queue`); from arq's own venv with redis-py 5.3.1 (arq requires < 6)",
            f"enqueue: arq has no bulk enqueue: `asyncio.gather` of {BATCH} `enqueue_job('noop')` per "
            "batch (concurrent WATCH/MULTI/EXEC transactions on redis-py's asyncio pool); single: "
            "`await enqueue_job('noop')` in a loop",
            "worker: `python bench/peers/arq_app.py C` = `run_worker(WorkerSettings, max_jobs=C)`, "
            "what `arq arq_app.WorkerSettings` runs, C concurrent jobs on one event loop; arq's log "
            "config at WARNING instead of INFO, as arq logs each job at INFO",
            "defaults otherwise: poll_delay 0.5 s and queue_read_limit max(5·C, 100), so at most "
            "max(5·C, 100) jobs start per 0.5 s (200 jobs/s at C=10, 250 at C=25); results kept "
            f"3600 s, job timeout 300 s, hiredis; N capped at {ARQ_MAX_JOBS} (that poll makes the common "
            "N take over a minute)",
        ]


# --- Huey (Redis) ----------------------------------------------------------------------------


class _HueyRedis(_Peer):
    name = "Huey (Redis)"
    peer = "huey"
    packages = ("huey",)
    queue_key = "huey.redis.default"

    def worker_argv(self, concurrency: int) -> list[str]:
        return [
            str(peers_venv.bin_path("huey_consumer")), "huey_redis_app.huey",
            "-w", str(concurrency), "-k", "thread", "-q",
        ]  # fmt: skip

    def describe(self) -> list[str]:
        return [
            '`RedisHuey("default", url=URL)` (its list: `huey.redis.default`) '
            f"(`bench/peers/huey_redis_app.py`); {_JOBS}",
            "enqueue: Huey has no bulk enqueue (`task.map` enqueues one by one): calling the task "
            "per job (one LPUSH each)",
            "worker: `huey_consumer huey_redis_app.huey -w C -k thread -q`: one process, C worker "
            "threads; `-q` = WARNING, as Huey logs each task at INFO",
            "defaults otherwise: blocking dequeue (BRPOP, 1 s timeout) per thread, results stored "
            "(a None result is not), scheduler thread polling every 1 s, redis-py with hiredis",
        ]


SYSTEMS: tuple[System, ...] = (
    _Celery(),
    _RQ(simple=False),
    _RQ(simple=True),
    _Dramatiq(),
    _Arq(),
    _HueyRedis(),
)
