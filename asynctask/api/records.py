"""JobRecord: one stored job, its exact bytes and what they decode to."""

from __future__ import annotations

import zlib
from typing import Any

from asynctask import payload
from asynctask.api.fields import Field, array, count, text, texts
from asynctask.api.reader import Context
from asynctask.brokers.reads import Stored
from asynctask.errors import PayloadError
from asynctask.payload import decompress_backtrace


class JobRecord:
    """A job read from a queue (also the base of sorted-set entries and busy jobs).

    Entries that are not valid jobs are kept, not skipped: ``error`` says why, ``item`` is
    the decoded JSON object if there was one, and ``raw`` always holds the stored bytes.
    ``ref`` is the backend's handle on the stored job (None on Redis, where the bytes name it;
    the row id in SQL).
    """

    def __init__(
        self, raw: bytes | str, context: Context, queue: str | None = None, ref: int | None = None
    ) -> None:
        self.raw = raw if isinstance(raw, bytes) else raw.encode()
        self.context = context
        self.ref = ref
        self.item: payload.JobDict | None
        self.error: str | None
        try:
            self.item = payload.loads(self.raw)
            self.error = None
        except PayloadError as exc:
            self.item = exc.job
            self.error = str(exc)
        own_queue = self.get("queue")
        #: The queue holding the job (for a queue record), else the one the job names.
        self.queue: str = (
            queue if queue is not None else own_queue if isinstance(own_queue, str) else "default"
        )

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.klass or '?'} jid={self.jid} queue={self.queue}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JobRecord) and other._identity() == self._identity()

    def __hash__(self) -> int:
        return hash(self._identity())

    def _identity(self) -> tuple[object, ...]:
        # Same stored bytes in the same place: the same job (a payload carries its unique jid).
        return (type(self), self.queue, self.raw, self.ref)

    def get(self, key: str, default: Any = None) -> Any:
        return default if self.item is None else self.item.get(key, default)

    @property
    def value(self) -> str:
        """The stored payload as text."""
        return self.raw.decode("utf-8", "replace")

    @property
    def valid(self) -> bool:
        return self.error is None

    jid = Field(text)
    klass = Field(text, "class")

    @property
    def display_class(self) -> str | None:
        """The class a person would name: ActiveJob's wrapped class rather than its wrapper."""
        return text(self.get("display_class")) or text(self.get("wrapped")) or self.klass

    args = Field(array)
    tags = Field(texts)
    created_at = Field(payload.timestamp)
    enqueued_at = Field(payload.timestamp)
    failed_at = Field(payload.timestamp)
    retried_at = Field(payload.timestamp)
    retry_count = Field(count)
    error_message = Field(text)
    error_class = Field(text)

    @property
    def error_backtrace(self) -> list[str] | None:
        """The decompressed backtrace lines, or None if absent or unreadable."""
        packed = text(self.get("error_backtrace"))
        if not packed:
            return None
        try:
            lines = decompress_backtrace(packed)
        except (ValueError, zlib.error):  # binascii and JSON errors are ValueErrors
            return None
        return lines if isinstance(lines, list) else None

    @property
    def latency(self) -> float:
        """Seconds since the job was enqueued (or created); 0 if it carries neither time."""
        since = self.enqueued_at or self.created_at
        return max(0.0, payload.now() - since) if since else 0.0

    def delete(self) -> bool:
        """Remove this exact job from its queue; False if it was no longer there."""
        return self.context.backend.queue_delete(self.queue, Stored(self.raw, self.ref))
