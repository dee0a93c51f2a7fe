"""How much of what jobs wrote a read shows: every answer bounded in bytes, whatever is stored.

Texts are bounded where they are written (``storable``), but rows written before that, or by
another writer, may hold anything, and an event may hold any number of messages. So a read
takes, in SQL, at most ``MESSAGES_SHOWN`` messages per event (the latest; ``earlier_messages``
counts the rest) and at most ``chars_read`` characters of each text, and then cuts the texts of
the whole answer (an events page, a task's first errors) to its byte budget, each event an equal
share, with the same marker as the writer's. An answer whose texts fit is returned unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from asynctask import storable
from asynctask.tracking.views import EventView, MessageView

#: Messages of one event a read shows at most: the latest.
MESSAGES_SHOWN = 50
#: Bytes of texts (errors, messages, strings in params) one answer holds at most.
PAGE_BUDGET = 1024 * 1024
#: The same for a task's first errors, which every poll of a failing task may carry.
TASK_BUDGET = 160 * 1024
#: No text is cut shorter than this, however many share the budget.
SHORTEST = 200
#: Characters of the marker a writer appends to a text it cut ("... (truncated, N bytes)").
MARKER_ROOM = 40


def chars_read(budget: int, events: int) -> int:
    """Characters of one text worth reading from SQL for an answer of up to ``events`` events:
    their share of the budget (texts read longer would be cut anyway), and never more than a
    writer keeps by default (with its marker)."""
    return min(storable.DEFAULT_TEXT_LIMIT + MARKER_ROOM, max(SHORTEST, budget // max(1, events))) + 1


def read(text: str, size: int) -> str:
    """A text as SQL gave it (its first ``chars_read`` characters) and its size in bytes: with
    the writer's marker when the read left some of it out."""
    if len(text) < size and len(text.encode()) < size:
        return f"{text}... (truncated, {size} bytes)"
    return text


def fit(events: Sequence[EventView], budget: int) -> list[EventView]:
    """``events`` with their texts cut so that all of them hold at most about ``budget`` bytes."""
    if sum(_size(e) for e in events) <= budget:
        return list(events)
    share = max(SHORTEST * 4, budget // max(1, len(events)))
    return [_fit_event(e, share) for e in events]


def cut(text: str, limit: int) -> str:
    """``text`` at most about ``limit`` bytes of JSON, with the writer's marker when it is cut
    (giving the size of the text as written, when it was cut before). JSON escapes every
    character outside ASCII (6 bytes, 12 beyond the BMP, for 2 to 4 of UTF-8): such a text is
    cut at a third of the limit."""
    limit = limit if text.isascii() else limit // 3
    if len(text) <= limit:
        return text
    marked = _MARKER.search(text)
    if marked is None:
        return storable.bounded(text, limit)
    head = storable.bounded(text[: marked.start()], limit)
    if head == text[: marked.start()]:
        return text
    return head[: head.rindex("... (truncated, ")] + marked.group()


_MARKER = re.compile(r"\.\.\. \(truncated, [0-9]+ bytes\)\Z")


def _fit_event(event: EventView, share: int) -> EventView:
    if _size(event) <= share:
        return event
    error_share = share // 4
    error = None if event.error is None else cut(event.error, error_share)
    params = None if event.params is None else storable.storable_value(event.params, error_share)
    messages = list(event.messages)
    left = share - error_share
    # Each message at least SHORTEST bytes: the latest are kept when not all of them fit.
    keep = max(1, min(len(messages), left // SHORTEST)) if messages else 0
    dropped = len(messages) - keep
    messages = messages[dropped:]
    each = max(SHORTEST, left // max(1, keep))
    return replace(
        event,
        error=error,
        params=params,
        messages=tuple(MessageView(m.at, m.status, cut(m.text, each)) for m in messages),
        earlier_messages=event.earlier_messages + dropped,
    )


def _size(event: EventView) -> int:
    """Bytes of JSON the event's texts take at most (cheap: from their lengths)."""
    params = 0 if event.params is None else _text_size(repr(event.params))
    return _text_size(event.error or "") + params + sum(_text_size(m.text) for m in event.messages)


def _text_size(text: str) -> int:
    return len(text) if text.isascii() else 12 * len(text)
