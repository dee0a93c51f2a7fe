"""What the runtime records about a tracked job, and how it travels through Redis.

A transition is one thing that happened to one job: a status change (with an optional
message), a message appended by job code (``log``), or a progress report. Each is encoded
as a compact JSON array; the worker sends many at once as one stream entry (see
``outbox``) and the flusher applies them to SQL.

Layouts (trailing nulls dropped):
  status     [jid, status, at, text, error_class, task, name, params]
  log        [jid, "log", at, text]
  progress   [jid, "progress", at, null, done, total]
  items      [jid, "items", at, message, done, failed, position, item]  (the last three: a failed item)
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any

from asynctask import payload, storable
from asynctask.storable import DEFAULT_TEXT_LIMIT
from asynctask.tracking.status import EventStatus

LOG = "log"
PROGRESS = "progress"
#: Counts of the items a job ran one by one (``asynctask.each``), with the item that failed, if one did.
ITEMS = "items"
_STATUSES = frozenset(s.value for s in EventStatus)
#: Bytes of a job or error class name kept: with the marker it fits the 255-character columns.
NAME_LIMIT = 200
#: What in encoded JSON needs ``storable``: an escaped U+0000 or a raw lone surrogate.
_UNSTORABLE_JSON = re.compile(r"\\u0000|[\ud800-\udfff]")
#: A string JSON spells as it is, between quotes: job ids, and texts such as "started".
_VERBATIM = re.compile(r"[\w .:-]*\Z", re.ASCII)
_encode = payload.c_encoder(allow_nan=True)


# Not frozen: a frozen dataclass is built four times slower, and two are built for every
# tracked job, in the worker and again in the flusher. None is changed once built.
@dataclass(slots=True)
class Transition:
    jid: str
    kind: str
    at: float
    text: str | None = None
    error_class: str | None = None
    #: Set on status transitions of jobs that are not part of a task, so that the flusher
    #: can create their event row.
    name: str | None = None
    params: list[Any] | None = None
    task: str | None = None
    done: int | None = None
    total: int | None = None
    failed: int | None = None
    #: A failed item's place in its chunk, and the item (``ITEMS``).
    position: int | None = None
    item: Any = None
    #: Position in the tracking stream, given by Redis when the transition is recorded.
    seq: int = 0

    @property
    def is_status(self) -> bool:
        return self.kind in _STATUSES

    def encode(self, limit: int = DEFAULT_TEXT_LIMIT) -> str:
        """The transition as JSON text every store can hold: strings made ``storable`` (each
        at most ``limit`` bytes), names cut to fit their columns."""
        text = self.text
        if (
            # Every job's ``working`` and ``finish`` in a task: spelled out, without the encoder,
            # exactly as ``dumps`` spells them.
            self.task is None
            and self.error_class is None
            and self.name is None
            and self.params is None
            and text is not None
            and self.kind in _STATUSES
            and _VERBATIM.match(text) is not None
            and _VERBATIM.match(self.jid) is not None
            # ASCII, one byte a character: within the limit, ``storable`` leaves it as it is.
            and len(text) <= limit
        ):
            return f'["{self.jid}","{self.kind}",{self.at!r},"{text}"]'
        encoded = self.dumps()
        # The common case, short texts of plain characters, costs one scan of the result. The
        # JSON encoder spells U+0000 as an escape and leaves lone surrogates raw.
        if len(encoded) * 4 <= limit and _UNSTORABLE_JSON.search(encoded) is None:
            return encoded
        return self.storable(limit).dumps()

    def storable(self, limit: int = DEFAULT_TEXT_LIMIT) -> Transition:
        """This transition with every string in it as tracking stores it."""
        return replace(
            self,
            text=None if self.text is None else storable.storable(self.text, limit),
            error_class=_name(self.error_class),
            name=_name(self.name),
            params=None if self.params is None else storable.storable_value(self.params, limit),
            item=storable.storable_value(self.item, limit) if self.position is not None else None,
        )

    def dumps(self) -> str:
        """The transition as JSON text, its strings as they are (``encode`` makes them storable)."""
        if self.kind == PROGRESS:
            fields: list[Any] = [self.jid, PROGRESS, self.at, None, self.done, self.total]
        elif self.kind == LOG:
            fields = [self.jid, LOG, self.at, self.text]
        elif self.kind == ITEMS:
            fields = [self.jid, ITEMS, self.at, self.text, self.done, self.failed]
            if self.position is not None:
                fields += (self.position, self.item)
        else:
            fields = [self.jid, self.kind, self.at, self.text, self.error_class]
            fields += (self.task, self.name, self.params)
            while fields[-1] is None:
                fields.pop()
        encoded = _encode(fields)
        return encoded


def _name(value: str | None) -> str | None:
    """A class or job name cut to fit its column (255 characters) with the marker."""
    return None if value is None else storable.bounded(storable.escaped(value), NAME_LIMIT)


def status(
    jid: str,
    kind: EventStatus,
    text: str | None = None,
    *,
    error_class: str | None = None,
    task: str | None = None,
    name: str | None = None,
    params: list[Any] | None = None,
) -> Transition:
    return Transition(
        jid, kind.value, time.time(), text, error_class=error_class, name=name, params=params, task=task
    )


_first_item = json.JSONDecoder()


def split_by_job(encoded: Sequence[str], jids: Collection[str]) -> tuple[list[str], dict[str, list[str]]]:
    """Encoded transitions apart: those of jobs ``jids`` by jid, and the rest in order.

    A unique job's push may store nothing (its key is taken): its transitions are written only
    if it is stored, by the step that stores it, or its event would wait for ever."""
    if not jids:
        return list(encoded), {}
    rest: list[str] = []
    by_job: dict[str, list[str]] = {}
    for entry in encoded:
        # Every encoded transition is a JSON array whose first item is its jid.
        jid = _first_item.raw_decode(entry, 1)[0]
        if jid in jids:
            by_job.setdefault(jid, []).append(entry)
        else:
            rest.append(entry)
    return rest, by_job


def decode_entry(first_seq: int, data: bytes | str) -> list[Transition]:
    """The transitions of one stream entry; the n-th gets ``first_seq + n``.

    Raises ValueError for an entry that is not a list of transitions.
    """
    items = json.loads(data)
    if not isinstance(items, list):
        raise ValueError("a tracking entry must be a JSON array")
    return [_decode(item, first_seq + offset) for offset, item in enumerate(items)]


def _decode(item: Any, seq: int) -> Transition:
    if (
        not isinstance(item, list)
        or len(item) < 3
        or not isinstance(item[0], str)
        or not isinstance(item[1], str)
        or isinstance(item[2], bool)
        or not isinstance(item[2], int | float)
    ):
        raise ValueError(f"malformed transition {item!r}")
    jid, kind, at = item[0], item[1], float(item[2])
    if len(item) <= 4 and kind in _STATUSES:
        # Nearly every transition: a job's start or end in a task, a status and its text. The
        # general path below would build its padded list and check four absent fields.
        return Transition(jid, kind, at, _text(item[3]) if len(item) == 4 else None, seq=seq)
    padded = [*item, None, None, None, None, None][:8]
    if kind == PROGRESS:
        return Transition(jid, kind, at, done=_int(padded[4]), total=_int(padded[5]), seq=seq)
    if kind == LOG:
        return Transition(jid, kind, at, _text(padded[3]), seq=seq)
    if kind == ITEMS:
        position = _int(padded[6])
        return Transition(
            jid,
            kind,
            at,
            _text(padded[3]),
            done=_int(padded[4]),
            failed=_int(padded[5]),
            position=position,
            item=None if position is None else storable.storable_value(padded[7], None),
            seq=seq,
        )
    if kind not in _STATUSES:
        raise ValueError(f"unknown transition kind {kind!r}")
    params = padded[7] if isinstance(padded[7], list) else None
    return Transition(
        jid,
        kind,
        at,
        _text(padded[3]),
        error_class=_name(_string(padded[4])),
        task=_text(padded[5]),
        name=_name(_string(padded[6])),
        # Escaped, not cut: the writer bounded the texts with its own limit.
        params=None if params is None else storable.storable_value(params, None),
        seq=seq,
    )


def _string(value: Any) -> str | None:
    return None if value is None else str(value)


def _text(value: Any) -> str | None:
    """A decoded text, escaped where another writer left what no store holds (it is not cut:
    the writer bounded it with its own limit, which may be larger than this process's)."""
    return None if value is None else storable.escaped(str(value))


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
