"""Running a job's chunk one item at a time, with one outcome per item: ``asynctask.each``.

An item whose function raises ``JobFailed`` is recorded as a failed item, with its message,
and the job goes on with the next one: a bad row fails alone, not the rows after it. Any other
exception fails the job as usual; the job's payload then carries how far it got, so that its
retry continues with the item that raised instead of running the done ones again.

A tracked job reports its item counts and progress with its other transitions (at most every
``REPORT_INTERVAL`` seconds, and with every failure and at the end), and its task adds them
up: ``TaskView.items`` and ``list_failed_items``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from asynctask import storable
from asynctask.context import JobContext, current_job
from asynctask.errors import JobFailed
from asynctask.tracking.transitions import ITEMS, Transition

T = TypeVar("T")

#: The payload field of a job interrupted by an exception: [next item, items done, items failed].
ITEMS_FIELD = "items_run"
#: Seconds between two reports of a job's item counts (failures and the end report at once).
REPORT_INTERVAL = 0.5
#: Bytes of JSON kept of a failed item; a larger one is kept as its cut JSON text.
ITEM_LIMIT = 4096


@dataclass(frozen=True, slots=True)
class ItemsRun:
    """What ``each`` did, over every run of the job."""

    done: int
    failed: int
    #: The messages of the items that failed in this run, by their place in the chunk.
    failures: dict[int, str]


def each(items: Sequence[T] | Iterable[T], run: Callable[[T], object]) -> ItemsRun:
    """Call ``run`` on each item, in order, inside the current job. ``JobFailed`` from an item
    records it as failed and goes on; another exception stops the job (its retry continues
    with that item). Returns the counts."""
    context = current_job()
    start, done, failed = _resumed_from(context)
    reporter = _Reporter(context, len(items) if isinstance(items, Sequence) else None)
    failures: dict[int, str] = {}
    position = start
    for position, item in enumerate(items):
        if position < start:
            continue
        try:
            run(item)
        except JobFailed as exc:
            failed += 1
            failures[position] = str(exc)
            reporter.failure(done, failed, position, item, str(exc))
            continue
        except BaseException:
            context.job[ITEMS_FIELD] = [position, done, failed]
            reporter.counts(done, failed, position)
            raise
        done += 1
        reporter.maybe(done, failed, position + 1)
    context.job.pop(ITEMS_FIELD, None)
    reporter.counts(done, failed, done + failed)
    return ItemsRun(done, failed, failures)


def _resumed_from(context: JobContext) -> tuple[int, int, int]:
    """Where an earlier run of the job stopped: (next item, done, failed); zeros on a first run."""
    state = context.job.get(ITEMS_FIELD)
    if (
        isinstance(state, list)
        and len(state) == 3
        and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in state)
    ):
        return state[0], state[1], state[2]
    return 0, 0, 0


def shown_item(item: Any) -> Any:
    """A failed item as tracking keeps it: the value, or its JSON text cut when it is large."""
    text = json.dumps(item, ensure_ascii=False, default=repr)
    if len(text) * 4 <= ITEM_LIMIT or len(text.encode()) <= ITEM_LIMIT:
        return item
    return storable.storable(text, ITEM_LIMIT)


class _Reporter:
    """Sends a tracked job's item counts and progress, no more often than ``REPORT_INTERVAL``."""

    def __init__(self, context: JobContext, total: int | None) -> None:
        self.context = context
        self.tracker = context.tracker if context.tracked else None
        self.total = total
        self.next_at = time.monotonic() + REPORT_INTERVAL

    def maybe(self, done: int, failed: int, reached: int) -> None:
        if self.tracker is not None and time.monotonic() >= self.next_at:
            self.counts(done, failed, reached)

    def counts(self, done: int, failed: int, reached: int) -> None:
        if self.tracker is None:
            return
        self.tracker.record_live(Transition(self.context.jid, ITEMS, time.time(), done=done, failed=failed))
        self._progress(reached)

    def failure(self, done: int, failed: int, position: int, item: Any, message: str) -> None:
        if self.tracker is None:
            return
        self.tracker.record_live(
            Transition(
                self.context.jid,
                ITEMS,
                time.time(),
                message,
                done=done,
                failed=failed,
                position=position,
                item=shown_item(item),
            )
        )
        self._progress(position + 1)

    def _progress(self, reached: int) -> None:
        self.context.progress(reached, self.total)
        self.next_at = time.monotonic() + REPORT_INTERVAL
