"""The worker's outbox: transitions waiting to be written by the broker.

Job threads only append to it (no round trip). It is emptied by whichever broker call comes
next: the fetch script that acknowledges finished jobs (so a job's ``finish`` is recorded
in the same atomic step as its acknowledgement), the retry pipeline (so ``error`` and
"waiting for retry" are recorded with the move to the retry set, before another process
can pick the job up), the shutdown requeue, or, when nothing else happens, the sender
thread a fraction of a second later.

Order matters: a job's ``working`` must enter the stream before its ``finish``. Entries are
taken oldest first, and ``draining`` holds a lock from taking them until the broker call that
writes them has returned, so two drains never overtake each other.

A failed job's ``error`` is *held* until the runtime has decided what comes next (a retry,
the dead set, giving up) and recorded it: written alone, by a sender drain in between, it
would show the job ended, and its task finished, while the job is about to run again.

Client pushes use ``collect()`` instead: the transitions recorded by client middleware
during one ``Client.push`` go into the same pipeline as the jobs.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext

from asynctask.storable import DEFAULT_TEXT_LIMIT
from asynctask.tracking.transitions import Transition

#: Transitions per stream entry at most, so one entry stays small.
MAX_BATCH = 2000


class Outbox:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._entries: list[str] = []
        #: Held transitions by job id, written just before their job's next one.
        self._held: dict[str, list[str]] = {}
        #: Set by the worker's tracker: acknowledgements must then wait for earlier drains.
        self.tracking = False
        #: Bytes of one tracked string at most (the worker's ``tracked_text_limit``).
        self.text_limit = DEFAULT_TEXT_LIMIT
        #: Entries written, and taken by the drain in progress: drains take the oldest, one at
        #: a time, so an entry's place in the queue (see ``mark``) tells whether it is written.
        self._written = 0
        self._in_flight = 0
        #: Per thread, the place of the last entry it queued.
        self._marks = threading.local()

    def add(self, *transitions: Transition) -> None:
        """Queue ``transitions``, in order and together (no drain takes only some of them),
        each after its job's held ones."""
        encoded = [t.encode(self.text_limit) for t in transitions]
        with self._lock:
            for transition, text in zip(transitions, encoded, strict=True):
                if self._held:
                    self._entries.extend(self._held.pop(transition.jid, ()))
                self._entries.append(text)
            self._marks.last = self._written + self._in_flight + len(self._entries)

    def hold(self, transition: Transition) -> None:
        """Keep ``transition`` out of every drain until its job's next transition is added, or
        until ``release``."""
        encoded = transition.encode(self.text_limit)
        with self._lock:
            self._held.setdefault(transition.jid, []).append(encoded)

    def release(self, jid: str) -> None:
        """Queue whatever is still held for ``jid`` (the job's run is over)."""
        if jid not in self._held:
            # Every job's run ends here, most with nothing held: no lock for them. Only the
            # job's own thread holds for its jid, so nothing can be added for it meanwhile.
            return
        with self._lock:
            self._entries.extend(self._held.pop(jid, ()))
            self._marks.last = self._written + self._in_flight + len(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def mark(self) -> int:
        """The place of the last entry this thread queued (0: none yet)."""
        last: int = getattr(self._marks, "last", 0)
        return last

    def written_through(self, mark: int) -> bool:
        """Whether every entry up to ``mark`` (``mark()``) has been written."""
        return self._written >= mark

    @contextmanager
    def draining(self, acknowledging: bool = False, through: int | None = None) -> Iterator[list[str]]:
        """Yield the oldest pending entries to write; they are put back if the block raises.

        ``acknowledging``: the caller's write also acknowledges finished jobs. Their ``finish``
        may be in a drain another thread is still writing, so it waits for that drain: a job
        is never acknowledged before its ``finish`` is stored.
        ``through``: a ``mark``; nothing is taken if the entries up to it were written while
        this drain waited for the one before it.
        """
        if not self._entries and not (acknowledging and self.tracking):
            yield []
            return
        with self._send_lock:
            if through is not None and self._written >= through:
                yield []
                return
            with self._lock:
                taken, self._entries = self._entries[:MAX_BATCH], self._entries[MAX_BATCH:]
                self._in_flight = len(taken)
            try:
                yield taken
            except BaseException:
                with self._lock:
                    self._entries[:0] = taken
                    self._in_flight = 0
                raise
            with self._lock:
                self._written += self._in_flight
                self._in_flight = 0


def draining(outbox: Outbox | None) -> AbstractContextManager[list[str]]:
    """``outbox.draining()``, or nothing to write when there is no outbox."""
    return outbox.draining() if outbox is not None else nullcontext([])


def pack(entries: Sequence[str]) -> str:
    """One stream entry's data: a JSON array of encoded transitions."""
    return "[" + ",".join(entries) + "]"


_collected: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "asynctask_collected", default=None
)


class Collection:
    """The transitions recorded (by ``record_on_push``) in a ``with`` block, while pushing jobs.
    A class rather than a generator-made context manager: every push opens one."""

    __slots__ = ("_entries", "_token")

    def __enter__(self) -> list[str]:
        self._entries: list[str] = []
        self._token = _collected.set(self._entries)
        return self._entries

    def __exit__(self, *_: object) -> None:
        _collected.reset(self._token)


def collect() -> Collection:
    """Gather the transitions recorded while pushing jobs: ``with collect() as transitions``."""
    return Collection()


def record_on_push(transition: Transition) -> None:
    """Add ``transition`` to the ``Client`` push in progress; nothing if none is collecting.

    The scheduled/retry poller re-pushes jobs without collecting: their ``enqueue`` was
    recorded when they were first pushed or scheduled for a retry.
    """
    entries = _collected.get()
    if entries is not None:
        entries.append(transition.encode())
