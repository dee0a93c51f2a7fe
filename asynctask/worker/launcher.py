"""Worker (Sidekiq's Launcher): one process's manager, poller and heartbeat, and its signals.

Start-up order matters for reliable fetch: the claims are registered and the first heartbeat
is written *before* any job is fetched, so that no live process ever looks dead. A worker
started while its broker is down waits for it, trying twice a second.

Every heartbeat also renews the registration of the claims, takes back the jobs of dead
processes, and gives back this process's claims that no thread runs (``Fetcher.reconcile``).
Each of these steps fails alone, logged, and is tried again at the next beat.

Signals (from the OS, or sent through the broker by the read API or Sidekiq's Web UI):
TSTP quiets (finish current jobs, fetch no more, stop polling); TERM and INT stop (quiet,
wait up to ``timeout`` seconds, then push unfinished jobs back and exit); TTIN logs every
thread's stack.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
import traceback
from collections import deque
from types import FrameType
from typing import TYPE_CHECKING, Any, cast

from asynctask import log, middleware, payload
from asynctask.brokers import open_broker
from asynctask.middleware import Chain
from asynctask.periodic import Schedules, default_schedules
from asynctask.registry import Registry, default_registry
from asynctask.settings import Settings, shown_url
from asynctask.supervision import Activity
from asynctask.tracking.store import TrackingApplier
from asynctask.tracking.tracker import Tracker
from asynctask.worker.feeds import FeedTicker
from asynctask.worker.heartbeat import Heartbeat, ProcessInfo
from asynctask.worker.manager import Manager
from asynctask.worker.periodic import Scheduler
from asynctask.worker.poller import Poller
from asynctask.worker.stats import Stats

if TYPE_CHECKING:
    from asynctask.worker.lost import LossWatch

logger = logging.getLogger("asynctask.worker")
lifecycle = logging.getLogger(log.LIFECYCLE)

#: Seconds between two looks of the main thread at the signals received.
SIGNAL_POLL = 0.1
#: The longest pause, in seconds, between two attempts to reach a broker that is down at start.
CONNECT_RETRY = 0.5


class Worker:
    def __init__(
        self,
        settings: Settings | None = None,
        *,
        registry: Registry | None = None,
        server_middleware: Chain[Any] | None = None,
        client_middleware: Chain[payload.JobDict] | None = None,
        connection: Any = None,
        schedules: Schedules | None = None,
    ) -> None:
        self.settings = (settings or Settings.from_env()).validated()
        self.registry = default_registry if registry is None else registry
        self.broker = open_broker(self.settings, connection)
        self.info = ProcessInfo.for_this_process()
        self.identity = self.info.identity
        self.stats = Stats()
        self.fetch = self.broker.fetcher(self.identity)
        self.fetch.outbox.text_limit = self.settings.tracked_text_limit
        self.tracker: Tracker | None = None
        self.applier: TrackingApplier | None = None
        if self.settings.tracking:
            self.applier = self.broker.tracking.applier(self.identity)
            self.tracker = Tracker(
                self.broker.tracking, self.fetch, self.applier.wake if self.applier else None
            )
        self.manager = Manager(
            self.settings,
            self.broker,
            self.fetch,
            self.registry,
            middleware.server_chain if server_middleware is None else server_middleware,
            self.stats,
            self.tracker,
        )
        client_chain = middleware.client_chain if client_middleware is None else client_middleware
        self.poller = Poller(self.broker, client_chain, self.settings.scheduled_poll_interval)
        self.scheduler = Scheduler(
            self.broker.periodic,
            default_schedules if schedules is None else schedules,
            self.registry,
            client_chain,
            self.identity,
            max_payload_bytes=self.settings.max_payload_bytes,
            clock=self.broker.clock.now,
        )
        self.feed_ticker = FeedTicker(self.broker.feeds)
        self.loss_watch = self._loss_watch()
        self.heartbeat = Heartbeat(
            self.broker,
            self.settings,
            self.info,
            self.stats,
            lambda: self.manager.busy,
            self.handle_signal,
            self.broker.clock,
            self.manager.loop_lag,
        )
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._started = False
        #: Signals received, handled by the main thread (see _install_signal_handlers).
        self._signals: deque[str] = deque()
        self._stop_signalled = False
        self._beat_thread = threading.Thread(target=self._beat_loop, name="asynctask-heartbeat", daemon=True)
        errors = self.broker.errors
        self._beating = Activity("heartbeat", logger, errors)
        self._applier_check = Activity("tracking applier check", logger, errors)
        self._recovering = Activity("orphan recovery", logger, errors)
        self._reconciling = Activity("claim check", logger, errors)

    def _loss_watch(self) -> LossWatch | None:
        """A watch for a broker that may come back empty (Redis); a SQL broker's jobs and
        tracking share one database, lost or kept together."""
        if not self.broker.loses_data_on_restart:
            return None
        # Loaded only here: it loads redis-py, which a SQL worker never needs.
        from asynctask.brokers.redis import RedisBroker
        from asynctask.worker.lost import LossWatch

        return LossWatch(cast(RedisBroker, self.broker), self.settings, self.tracker)

    def run(self, *, install_signal_handlers: bool = True) -> None:
        """Start, then block until TERM/INT (or ``stop()``), then shut down gracefully."""
        if install_signal_handlers:
            self._install_signal_handlers()
        self.start()
        try:
            self._wait_for_stop(None)
        finally:
            self.shutdown()

    def start(self) -> None:
        """Start every thread, once the broker answered (waiting for it, unless stopped first)."""
        if not self._reach_broker():
            return
        self._started = True
        queues = " ".join(
            f"{q.name}" + (f",{q.weight}" if q.weight else "") + ("" if q.fair else ",fifo")
            for q in self.settings.served_queues
        )
        tracked = self.settings.tracking or not self.settings.uses_redis
        lifecycle.info(
            "worker started",
            extra={
                "fields": {
                    "identity": self.identity,
                    "queues": queues,
                    "concurrency": self.settings.concurrency,
                    "jobs": len(self.registry),
                    "broker": shown_url(self.settings.broker),
                    "database": shown_url(self.settings.database_url) if tracked else "none (tracking off)",
                }
            },
        )
        if self.tracker is not None:
            self.tracker.start()
        if self.applier is not None:
            self.applier.start()
        self.manager.start()
        self.poller.start()
        self.scheduler.start()
        self.feed_ticker.start()
        self._beat_thread.start()

    def quiet(self) -> None:
        self.heartbeat.quiet = True
        self.poller.stop()
        self.scheduler.stop()
        self.feed_ticker.stop()
        self.manager.quiet()

    def stop(self) -> None:
        """Ask ``run`` to shut down (safe from any thread or a signal handler)."""
        self._stopping.set()

    def shutdown(self) -> None:
        """Quiet, wait up to ``timeout`` for busy jobs, push back the rest, leave the process set."""
        if self._stopped.is_set():
            return
        if not self._started:
            self._stopped.set()
            self.broker.close()
            logger.warning(
                "worker stopped before its broker answered", extra={"fields": {"identity": self.identity}}
            )
            return
        deadline = time.monotonic() + self.settings.timeout
        self.quiet()
        self.manager.stop(deadline)
        if self.loss_watch is not None:
            self.loss_watch.stop()
        if self.tracker is not None:
            self.tracker.stop()
        if self.applier is not None:
            self.applier.stop()
        self._stopped.set()
        if self._beat_thread.is_alive():
            self._beat_thread.join()
        self.heartbeat.clear()
        self.broker.close()
        lifecycle.info("worker stopped", extra={"fields": {"identity": self.identity}})

    @property
    def stop_signalled(self) -> bool:
        """Whether TERM or INT came, from the OS or through the broker, acted on or not yet."""
        return self._stop_signalled or any(name in ("TERM", "INT") for name in self._signals)

    def handle_signal(self, name: str) -> None:
        # A signal often comes twice: a terminal's Ctrl-C or Ctrl-Z, or systemd's stop, signals
        # the whole process group, and a second Ctrl-C may follow the first. The second changes
        # nothing, and says nothing.
        if name == "TSTP":
            if not self.manager.quieting.is_set():
                logger.warning("TSTP: going quiet")
            self.quiet()
        elif name in ("TERM", "INT"):
            self._stop_signalled = True
            if not self._stopping.is_set():
                logger.warning("%s: shutting down", name)
            self.stop()
        elif name == "TTIN":
            self.dump_threads()
        else:
            logger.warning("ignoring unknown signal %r", name)

    def dump_threads(self) -> None:
        frames = sys._current_frames()
        for thread in threading.enumerate():
            frame = frames.get(thread.ident or -1)
            stack = "".join(traceback.format_stack(frame)) if frame else "(no frame)"
            logger.warning("thread %s\n%s", thread.name, stack)

    def _reach_broker(self) -> bool:
        """Write the first heartbeat and register the claims, retrying while the broker is
        down; False if the worker was told to stop first."""
        reaching = Activity(
            f"reaching the broker at {shown_url(self.settings.broker)}",
            logger,
            self.broker.errors,
            max_pause=CONNECT_RETRY,
        )
        while not self._stopping.is_set():
            # The heartbeat first: a process record is never listed without its description.
            if reaching.attempt(self._beat_and_register):
                return True
            self._wait_for_stop(reaching.pause())
        return False

    def _wait_for_stop(self, seconds: float | None) -> bool:
        """Wait up to ``seconds`` (None: for ever) for a stop, acting on the signals received
        meanwhile; True once stopped."""
        deadline = None if seconds is None else time.monotonic() + seconds
        while True:
            while self._signals:
                self.handle_signal(self._signals.popleft())
            left = SIGNAL_POLL if deadline is None else min(SIGNAL_POLL, deadline - time.monotonic())
            if self._stopping.wait(max(0.0, left)):
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False

    def _beat_and_register(self) -> bool:
        self.heartbeat.beat()
        self.fetch.register()
        if self.loss_watch is not None:
            # From the first beat on: a loss is noticed by comparing with the token seen before.
            self.loss_watch.check()
        return True

    def _beat_loop(self) -> None:
        interval = self.settings.heartbeat_interval
        while not self._stopped.wait(interval):
            self.beat_once()

    def beat_once(self) -> None:
        """One heartbeat and the checks that follow it; none of them raises."""
        if not self._beating.attempt(self._beat_and_register):
            return
        if self.applier is not None and not self._stopping.is_set():
            self._applier_check.attempt(self.applier.check)
        self._recovering.attempt(lambda: self.broker.recover_orphans(self.identity))
        if not self._stopping.is_set():
            self._reconciling.attempt(self.fetch.reconcile)
        self.manager.placement.review()

    def _install_signal_handlers(self) -> None:
        def handler(signum: int, _frame: FrameType | None) -> None:
            name = signal.Signals(signum).name.removeprefix("SIG")
            if name == "TTIN":
                # The stacks are wanted now, even from a main thread stuck in its shutdown.
                self.dump_threads()
                return
            # A handler runs between two bytecodes of the main thread, maybe inside the lock of
            # the event that stop() sets (a second TERM during the first one's set() deadlocked
            # on it): it only queues the signal, for the main thread's loop in run().
            self._signals.append(name)

        for name in ("SIGTERM", "SIGINT", "SIGTSTP", "SIGTTIN"):
            signal.signal(getattr(signal, name), handler)
        # A worker command that replaced its process to recycle it holds them until now.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
