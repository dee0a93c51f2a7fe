"""What the runner needs to know about a job system: how to enqueue, how to start a worker."""

from __future__ import annotations

import compileall
import os
from abc import ABC, abstractmethod
from pathlib import Path

import redis

from asynctask.keys import Keys

#: The repository root: workers and enqueuers run from here, as a developer would run them.
ROOT = Path(__file__).resolve().parents[2]

#: Variables that would point a child at another Redis or change its settings behind our back.
_SCRUBBED_PREFIXES = ("ASYNCTASK_", "SIDEKIQ_", "BENCH_")
_SCRUBBED = ("REDIS_URL", "REDIS_PROVIDER", "RUBYOPT", "PYTHONPATH", "PYTHONSTARTUP")


def byte_compile(*trees: Path) -> None:
    """Write the bytecode of every module under ``trees``, as pip does when it installs a
    package: workers then start as an installed AsyncTask does. An editable install never
    writes it when ``PYTHONDONTWRITEBYTECODE`` is set, and a worker would compile each of its
    modules at every start (about 60 ms on this machine's reference run)."""
    for tree in trees:
        if not compileall.compile_dir(tree, quiet=1):
            raise SystemExit(f"python -m bench: could not byte-compile {tree}")


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without Redis or job-system settings, plus ``extra``."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in _SCRUBBED and not key.startswith(_SCRUBBED_PREFIXES)
    }
    env.update(extra)
    return env


def marker_env(marker: Path | None) -> dict[str, str]:
    """``BENCH_MARKER``, where the no-op jobs append their byte, when there is a ``marker``."""
    return {} if marker is None else {"BENCH_MARKER": str(marker)}


def asynctask_queued(conn: redis.Redis, queue: str = "default") -> int:
    """Jobs waiting in an AsyncTask queue: its ``queue:<name>`` list and, in a fair queue, the
    lists of its shares and its urgent list (what ``asynctask.api.Queue.size`` counts)."""
    keys = Keys()
    members = [m.decode() if isinstance(m, bytes) else str(m) for m in conn.lrange(keys.shares(queue), 0, -1)]
    pipe = conn.pipeline(transaction=False)
    pipe.llen(keys.queue(queue))
    pipe.llen(keys.urgent(queue))
    for member in members:
        if member:
            pipe.llen(keys.share(queue, member))
    return sum(int(n) for n in pipe.execute())


def sidekiq_queued(conn: redis.Redis) -> int:
    """Jobs waiting in Sidekiq's (and AsyncTask's) ``queue:default`` list."""
    return int(conn.llen("queue:default"))


class System(ABC):
    """One job system under test, on the bench's Redis.

    ``enqueue_argv(url, mode, jobs, batch)`` is a command printing ``{"jobs", "seconds"}``;
    mode "bulk" enqueues no-op jobs with the system's own bulk call (``batch`` per call,
    or one by one where it has none), "single" one call per job.
    ``latency_argv(url, jobs, rate)`` enqueues ``jobs`` latency jobs, paced at ``rate`` per
    second, each carrying its enqueue time (``time.time()``); it prints ``{"jobs", "seconds"}``.
    ``worker_argv(concurrency)`` starts one worker process on the system's default queue with
    both jobs loaded; ``env(url, marker)`` is the environment of all three.

    Every no-op job appends one byte to the ``BENCH_MARKER`` file; every latency job appends
    one 16-byte record, ``b"%15.6f\n" % ((time.time() - sent) * 1000)`` (milliseconds).
    """

    name: str
    #: Whether the system counts processed jobs in Sidekiq's ``stat:processed``.
    processed_stat = False
    #: Key prefix of AsyncTask's in-flight lists, checked to be empty after a run ("" if none).
    inflight_pattern = ""
    #: At most this many jobs per drain (0: no cap), for systems so slow that the common N
    #: would take minutes; RESULTS.md shows each system's N.
    max_jobs = 0
    #: Where its processes run: a ``python -m`` process imports first from there.
    cwd = ROOT

    @abstractmethod
    def enqueue_argv(self, url: str, mode: str, jobs: int, batch: int) -> list[str]: ...

    @abstractmethod
    def latency_argv(self, url: str, jobs: int, rate: float) -> list[str]: ...

    @abstractmethod
    def worker_argv(self, concurrency: int) -> list[str]: ...

    @abstractmethod
    def env(self, url: str, marker: Path | None) -> dict[str, str]: ...

    @abstractmethod
    def describe(self) -> list[str]:
        """Human-readable configuration, written to RESULTS.md."""

    def versions(self) -> dict[str, str]:
        """Versions of what runs (interpreter, the system, its Redis client), for RESULTS.md."""
        return {}

    def queued(self, conn: redis.Redis) -> int:
        """Jobs waiting in the system's queue: N after the enqueue, 0 after the drain."""
        return sidekiq_queued(conn)

    def jobs(self, wanted: int) -> int:
        return min(wanted, self.max_jobs) if self.max_jobs else wanted


def only(systems: list[System], names: list[str] | None) -> list[System]:
    """The ``systems`` named in ``names``, or all of them when ``names`` is None."""
    return systems if names is None else [system for system in systems if system.name in names]
