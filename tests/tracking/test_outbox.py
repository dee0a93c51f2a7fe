"""The outbox's drains: which entries a writer takes, and when a thread's entries are written."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from asynctask.tracking.outbox import Outbox
from asynctask.tracking.status import EventStatus
from asynctask.tracking.transitions import status


def queued(outbox: Outbox, jid: str) -> int:
    """Queue one transition of ``jid`` from a thread of its own; that thread's mark."""

    def add() -> int:
        outbox.add(status(jid, EventStatus.WORKING))
        return outbox.mark()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(add).result()


def test_a_thread_whose_entries_went_out_with_another_s_write_takes_nothing() -> None:
    outbox = Outbox()
    outbox.tracking = True
    first, second = queued(outbox, "a"), queued(outbox, "b")
    assert (first, second) == (1, 2)
    taken: list[list[str]] = []
    waiting = threading.Event()

    def acknowledge() -> None:
        waiting.set()
        with outbox.draining(acknowledging=True, through=second) as entries:
            taken.append(entries)

    with outbox.draining(acknowledging=True, through=first) as writing:
        assert len(writing) == 2
        assert not outbox.written_through(first)
        other = threading.Thread(target=acknowledge)
        other.start()
        waiting.wait(5)
        # Queued while "b" is on its way, by a third thread: not "b"'s to write.
        queued(outbox, "c")
    other.join(5)
    assert taken == [[]]
    assert outbox.written_through(second) and len(outbox) == 1


def test_a_failed_write_puts_its_entries_back_unwritten() -> None:
    outbox = Outbox()
    outbox.tracking = True
    mark = queued(outbox, "a")
    with pytest.raises(ConnectionError), outbox.draining(acknowledging=True, through=mark):
        raise ConnectionError("the store went away")
    assert not outbox.written_through(mark) and len(outbox) == 1
    with outbox.draining(acknowledging=True, through=mark) as entries:
        assert len(entries) == 1
    assert outbox.written_through(mark) and len(outbox) == 0


def test_held_entries_count_where_they_are_queued() -> None:
    outbox = Outbox()
    outbox.hold(status("a", EventStatus.ERROR, "boom"))
    assert outbox.mark() == 0
    outbox.add(status("a", EventStatus.ENQUEUE, "waiting for retry 1 of 1"))
    assert outbox.mark() == 2
    with outbox.draining() as entries:
        assert len(entries) == 2
    assert outbox.written_through(2)
