"""Running a resumable job: a generator function whose every yield is a checkpoint.

The run starts from the job's stored checkpoint (``Broker.checkpoints``; the payload's
``cursor`` if none is stored), calling the function with ``cursor=`` it. Between iterations
it hands the job back when asked:

- the worker is stopping (TERM): the checkpoint is stored and the job goes back to its
  queue with the rest of the worker's claims; the next run continues from it;
- a stop was requested (``stop_job``), the job's task was cancelled, or its fed task was
  paused: seen when the checkpoint is stored, at most every ``checkpoint_interval`` seconds.

Iterations are pulled in batches sized so that a batch takes a few milliseconds, and the
batch is consumed in C (``islice`` into a one-slot ``deque``, nothing allocated per
iteration): a job of a million cheap iterations costs about what the same loop costs in a
plain job, while a job of slow iterations is still checked between any two of them.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncGenerator, Callable
from dataclasses import KW_ONLY, dataclass, field
from types import GeneratorType
from typing import Any

from asynctask import payload
from asynctask.brokers.checkpoints import Checkpoint, Checkpoints
from asynctask.context import Iteration
from asynctask.errors import JobInterrupted

logger = logging.getLogger("asynctask.resumable")

#: A batch shorter than this (seconds) doubles the next one; longer than ``SLOW``, halves it.
FAST = 0.002
SLOW = 0.02
#: The largest batch, so that the checks between batches never wait on millions of iterations.
MOST = 1 << 16


def encode_cursor(value: Any) -> str:
    """A yielded value as stored: JSON text, or a clear error for a value JSON cannot hold."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"a resumable job must yield JSON values as its checkpoints: {exc}") from None


def start_cursor(job: payload.JobDict, stored: str | None) -> str | None:
    """The checkpoint a run starts from: the stored one, else the one its payload carries (a
    job resumed after its stored checkpoint expired, or pushed with one)."""
    if stored is not None:
        return stored
    return encode_cursor(job["cursor"]) if "cursor" in job else None


def begin(job: payload.JobDict, stored: Checkpoint, iteration: Iteration) -> Any:
    """Set ``iteration`` to where the run starts (``stored``, or the payload's cursor) and
    return the cursor to call the job with; ``JobInterrupted`` if a stop came meanwhile."""
    iteration.cursor = start_cursor(job, stored.cursor)
    iteration.iterations = stored.iterations
    if stored.stop:
        raise JobInterrupted("stop", iteration.cursor)
    return json.loads(iteration.cursor) if iteration.cursor is not None else None


@dataclass(eq=False)
class Runner:
    """Drives one run of a resumable job; ``run`` returns when it is done or raises
    ``JobInterrupted`` once its checkpoint is stored."""

    jid: str
    checkpoints: Checkpoints
    state: Iteration
    _: KW_ONLY
    interval: float
    stopping: threading.Event
    cancelled: Callable[[], bool]
    paused: Callable[[], bool]
    progress: Callable[[int, int], None]
    #: The cursor of the state as stored last (no write when nothing moved).
    _stored: str | None = field(init=False)

    def __post_init__(self) -> None:
        self._stored = self.state.cursor

    def run(self, generator: GeneratorType[Any, None, None]) -> None:
        state = self.state
        batch = 1
        next_store = time.monotonic() + self.interval
        try:
            while True:
                started = time.perf_counter()
                tail = deque(itertools.islice(generator, batch), maxlen=1)
                took = time.perf_counter() - started
                if tail:
                    state.cursor = encode_cursor(tail[0])
                # A finished generator drops its frame: that, not a count of what the batch
                # took, tells the last batch (counting each item would double a cheap loop's cost).
                if generator.gi_frame is None:
                    return
                state.iterations += batch
                if self.stopping.is_set():
                    self._store_or_log()
                    raise JobInterrupted("shutdown", state.cursor)
                if time.monotonic() >= next_store:
                    self._checkpoint()
                    next_store = time.monotonic() + self.interval
                if took < FAST and batch < MOST:
                    batch *= 2
                elif took > SLOW and batch > 1:
                    batch //= 2
        except JobInterrupted:
            raise
        except BaseException:
            # A failure (or a hard shutdown) keeps the work done so far: the retry continues from it.
            self._store_or_log()
            raise

    async def arun(self, generator: AsyncGenerator[Any, None]) -> None:
        """``run`` for an async generator, one iteration at a time (each one awaits anyway); the
        checkpoints' round trips go to a thread, never on the event loop."""
        state = self.state
        next_store = time.monotonic() + self.interval
        try:
            async for value in generator:
                state.cursor = encode_cursor(value)
                state.iterations += 1
                if self.stopping.is_set():
                    await asyncio.to_thread(self._store_or_log)
                    raise JobInterrupted("shutdown", state.cursor)
                if time.monotonic() >= next_store:
                    await asyncio.to_thread(self._checkpoint)
                    next_store = time.monotonic() + self.interval
        except JobInterrupted:
            raise
        except BaseException:
            # A failure (or a shutdown's cancel) keeps the work done so far, as ``run`` does.
            await asyncio.shield(asyncio.to_thread(self._store_or_log))
            raise
        finally:
            await generator.aclose()

    def _checkpoint(self) -> None:
        state = self.state
        try:
            stop = self._store()
            cancelled = not stop and self.cancelled()
            paused = not (stop or cancelled) and self.paused()
        except self.checkpoints.errors as exc:
            # The job goes on: the next checkpoint is stored when the store answers again.
            logger.warning("could not store a checkpoint: %s", exc, extra={"fields": {"jid": self.jid}})
            return
        if state.total is not None:
            self.progress(state.iterations, state.total)
        if stop:
            raise JobInterrupted("stop", state.cursor)
        if cancelled:
            raise JobInterrupted("cancel", state.cursor)
        if paused:
            raise JobInterrupted("pause", state.cursor)

    def _store(self) -> bool:
        state = self.state
        stop = self.checkpoints.save(self.jid, state.cursor or "null", state.iterations)
        self._stored = state.cursor
        return stop

    def _store_or_log(self) -> None:
        if self.state.cursor is None or self.state.cursor == self._stored:
            return
        try:
            self._store()
        except Exception as exc:
            logger.error(
                "could not store the checkpoint of an interrupted run: %s; it continues from the one before",
                exc,
                extra={"fields": {"jid": self.jid, "cursor": self.state.cursor}},
            )
