"""The flusher in a process of its own (the default), supervised by its worker.

Applying transitions to SQL is CPU work in Python; in a thread of the worker it would hold
the GIL that the job threads need. A child process (``asynctask flusher``) runs it on another
core instead. It starts when there is something to flush: the worker's first tracked job, or
a heartbeat that finds the tracking stream not empty; a worker that never sees tracking
costs no extra process. The worker restarts the child if it dies (checked at every
heartbeat), stops it after its own last transitions are written, and the child exits by
itself if the worker disappears (kill -9), so it never outlives its worker.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

from asynctask.brokers.redis.connection import connect
from asynctask.keys import Keys
from asynctask.settings import Settings

logger = logging.getLogger("asynctask.tracking")

#: Seconds the child gets to apply what is left after TERM before it is killed.
STOP_TIMEOUT = 15.0
#: Seconds between the child's checks that its worker is still alive.
PARENT_CHECK_INTERVAL = 0.5
#: Seconds between checks of a tracking database that is missing or not migrated.
DATABASE_RECHECK_INTERVAL = 5.0
#: What a warning about an unusable tracking database adds.
UNTRACKED_MEANWHILE = "until then, tracked jobs run but their progress is not recorded"


class FlusherProcess:
    def __init__(self, settings: Settings, consumer: str) -> None:
        self.settings = settings
        self.consumer = consumer
        self.process: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._stopping = False

    @property
    def started(self) -> bool:
        return self.process is not None

    def ensure_started(self) -> None:
        with self._lock:
            if self.process is None and not self._stopping:
                self._spawn()

    def _spawn(self) -> None:
        s = self.settings
        env = {
            **os.environ,
            "ASYNCTASK_BROKER_URL": s.broker,
            "ASYNCTASK_NAMESPACE": s.namespace,
            "ASYNCTASK_DATABASE_URL": s.database_url,
            "ASYNCTASK_LOG_LEVEL": s.log_level,
            "ASYNCTASK_LOG_FORMAT": s.log_format,
        }
        command = [sys.executable, "-m", "asynctask", "flusher", "--consumer", self.consumer]
        command += ["--parent", str(os.getpid())]
        # The child inherits a blocked TERM and unblocks it once its handler is set: a worker
        # stopped just after its first tracked job must reach the handler, which applies what is
        # left, rather than kill the child while it starts.
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        try:
            self.process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)

    def check(self, stream_has_entries: Callable[[], bool]) -> None:
        """At every heartbeat: start the child if the stream has work, restart it if it died."""
        with self._lock:
            if self._stopping:
                return
            if self.process is None:
                if stream_has_entries():
                    self._spawn()
                return
            if self.process.poll() is None:
                return
            logger.error(
                "tracking flusher process exited with status %s; restarting it", self.process.returncode
            )
            self._spawn()

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            logger.error("tracking flusher process did not stop in %.0f s; killing it", STOP_TIMEOUT)
            process.kill()
            process.wait()


def run_flusher(
    settings: Settings, consumer: str, parent: int | None, database_problem: Callable[[], str | None]
) -> None:
    """Body of ``asynctask flusher``: apply the stream until TERM/INT or the parent is gone.

    ``database_problem`` says what keeps the tracking database from being used (it does not
    exist, or was never migrated), or None: while it says something, the flusher warns once
    and checks again every ``DATABASE_RECHECK_INTERVAL``, and the transitions wait in the
    stream."""
    if not settings.uses_redis:
        raise ValueError(
            f"the broker {settings.broker!r} is SQL: it applies tracking itself, no flusher is needed"
        )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda _signum, _frame: stop.set())
    if parent is None:
        signal.signal(signal.SIGINT, lambda _signum, _frame: stop.set())
    else:
        # Ctrl-C reaches the whole process group; the worker stops this child itself, after
        # writing its own last transitions, so that they are applied before it exits.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Blocked by the worker that started this child (see ``FlusherProcess._spawn``).
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    problem = database_problem()
    if problem is not None:
        logger.warning("%s; %s", problem, UNTRACKED_MEANWHILE)
        while problem is not None:
            recheck = time.monotonic() + DATABASE_RECHECK_INTERVAL
            while time.monotonic() < recheck:
                if not _wait(stop, parent, PARENT_CHECK_INTERVAL):
                    return
            problem = database_problem()
        logger.info("the tracking database is ready; applying tracked jobs' transitions")
    # Imported here, in the child: the worker that starts it never loads SQLAlchemy for it.
    from asynctask.brokers.redis.flusher import PARALLEL_PARTS, Flusher
    from asynctask.db.engine import create_database_engine, normalize_url, writer

    parallel = PARALLEL_PARTS.get(normalize_url(settings.database_url).get_backend_name(), 1)
    # One database connection kept: the others are opened while large batches are applied in
    # parts and closed when they are given back, so that a quiet flusher holds one of the
    # server's connections.
    engine = create_database_engine(settings.database_url, pool_size=1, max_overflow=parallel - 1)
    conn = connect(settings.broker, max_connections=4)
    flusher = Flusher(conn, Keys(settings.namespace), writer(engine), consumer, parallel)
    flusher.start()
    try:
        while _wait(stop, parent, PARENT_CHECK_INTERVAL):
            pass
    finally:
        flusher.stop()
        engine.dispose()
        conn.close()


def _wait(stop: threading.Event, parent: int | None, seconds: float) -> bool:
    """Wait ``seconds``; False if the flusher is to stop (TERM, or its worker is gone)."""
    if stop.wait(seconds):
        return False
    if parent is not None and os.getppid() != parent:
        logger.warning("worker %d is gone; tracking flusher stopping", parent)
        return False
    return True
