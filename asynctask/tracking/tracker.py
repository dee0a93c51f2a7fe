"""The worker side of tracking: what the tracking middleware, the retrier and job code call.

Recording a transition appends it to the process's outbox and costs no round trip; the
outbox is written by the broker with the next fetch, retry or shutdown step, or by the
sender thread within ``SEND_INTERVAL`` (see ``outbox``). The SQL broker applies it to the
tracking tables in that same transaction; the Redis broker appends it to the tracking stream,
which a flusher (a child process by default, see ``brokers.redis.flusher_process``) applies to SQL.
Nothing here ever fails a job: while the broker or SQL is down they log and try again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from asynctask import payload
from asynctask.errors import error_class_name
from asynctask.supervision import Activity
from asynctask.tracking import rules, transitions
from asynctask.tracking.status import EventStatus
from asynctask.tracking.store import Claims, TrackingStore
from asynctask.tracking.transitions import Transition

logger = logging.getLogger("asynctask.tracking")

#: Seconds between writes of the outbox when no fetch or retry has written it.
SEND_INTERVAL = 0.1
#: The longest wait after the broker refused a write of the outbox.
SEND_ERROR_PAUSE = 1.0


def is_tracked(job: payload.JobDict) -> bool:
    """Jobs of a task are always tracked; others when they carry ``track: true``."""
    return job.get("track") is True or isinstance(job.get("task"), str)


class Tracker:
    def __init__(
        self, store: TrackingStore, fetch: Claims, on_first_record: Callable[[], None] | None = None
    ) -> None:
        self.store = store
        #: Called once, when this process records its first transition (starts the flusher).
        self._on_first_record = on_first_record
        self.fetch = fetch
        self.outbox = fetch.outbox
        self.outbox.tracking = True
        self._cancel_lock = threading.Lock()
        self._known_generation: bytes | None = None
        self._cancelled: frozenset[str] = frozenset()
        self._stopped = threading.Event()
        self._sender = threading.Thread(target=self._send_loop, name="asynctask-tracking-sender", daemon=True)
        #: Whether the sender waits for job code's first transition (``start(on_demand=True)``).
        self._on_demand = False
        self._sender_lock = threading.Lock()

    def record(self, *transitions: Transition) -> None:
        """Queue ``transitions`` to be written together, in order."""
        self._first_record()
        self.outbox.add(*transitions)

    def record_live(self, *transitions: Transition) -> None:
        """Queue what running job code recorded (its log, its progress, its items): written by the
        sender within ``SEND_INTERVAL``, while the job still runs."""
        self.record(*transitions)
        if self._on_demand and self._sender.ident is None:
            self._start_sender()

    def record_pending(self, transition: Transition) -> None:
        """Queue a failed job's ``error``, to be written with what the runtime decides next
        (``Outbox.hold``)."""
        self._first_record()
        self.outbox.hold(transition)

    def settled(self, jid: str) -> None:
        """The job's run is over: nothing it recorded is held any longer."""
        self.outbox.release(jid)

    def _first_record(self) -> None:
        if self._on_first_record is not None:
            wake, self._on_first_record = self._on_first_record, None
            wake()

    def retry_scheduled(self, job: payload.JobDict, count: int, limit: int) -> None:
        """The runtime put a failed job in the retry set: it waits again."""
        if is_tracked(job):
            self.record(rules.waiting_for_retry(job["jid"], count + 1, limit))

    def gave_up(self, job: payload.JobDict, outcome: str) -> None:
        """The runtime will not retry a failed job: it stays ``error``; say where it went."""
        if is_tracked(job):
            self.record(rules.gave_up(job["jid"], outcome))

    def buried(self, job: payload.JobDict, exc: BaseException) -> None:
        """A job this process cannot run (unknown class, bad args) went to the dead set."""
        if is_tracked(job) and isinstance(job.get("jid"), str):
            self.record(
                transitions.status(
                    job["jid"],
                    EventStatus.ERROR,
                    f"cannot run: {exc}; moved to the dead set",
                    error_class=error_class_name(exc),
                )
            )

    def was_cancelled(self, task: str) -> bool:
        """Whether ``task`` was cancelled before the job about to start was claimed.

        The cancelled set is reloaded only when the generation seen by the last claim changed,
        so this costs no round trip on the hot path.
        """
        generation = self.fetch.cancel_generation
        if generation != self._known_generation:
            with self._cancel_lock:
                if generation != self._known_generation:
                    self._cancelled = self.store.cancelled_tasks()
                    self._known_generation = generation
        return task in self._cancelled

    def is_cancelled_now(self, task: str) -> bool:
        """Asked by running job code: one round trip, always current."""
        return self.store.is_cancelled(task)

    def start(self, *, on_demand: bool = False) -> None:
        """Start the sender thread; ``on_demand``: at the first ``record_live``, for a process
        whose runtime writes the outbox itself when each job starts and ends (an RQ work horse,
        forked for one job: a thread started in every horse would cost more than a no-op job)."""
        if on_demand:
            self._on_demand = True
        else:
            self._start_sender()

    def _start_sender(self) -> None:
        with self._sender_lock:
            if self._sender.ident is None and not self._stopped.is_set():
                self._sender.start()

    def stop(self) -> None:
        """Stop the sender and write what is left (after the jobs have stopped)."""
        self._stopped.set()
        if self._sender.is_alive():
            self._sender.join()
        self.send()

    def send(self) -> bool:
        """Write the outbox now (before a shutdown pushes unfinished jobs back).

        False if the broker refused; the transitions stay in the outbox for the next try.
        """
        try:
            self.store.record(self.outbox)
        except self.store.errors as exc:
            logger.error("could not write %d tracking transition(s): %s", len(self.outbox), exc)
            return False
        return True

    def _send_loop(self) -> None:
        activity = Activity("tracking send", logger, self.store.errors, max_pause=SEND_ERROR_PAUSE)
        while not self._stopped.wait(activity.pause() if activity.failures else SEND_INTERVAL):
            if len(self.outbox):
                activity.attempt(lambda: self.store.record(self.outbox))
            else:
                # A fetch or a retry wrote what was waiting: the store answers again.
                activity.succeeded()
