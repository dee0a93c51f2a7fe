"""JobRecord: one stored job, its exact bytes and what they decode to."""

from __future__ import annotations

import zlib
from typing import Any

from asynctask import payload
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

    def _text(self, key: str) -> str | None:
        value = self.get(key)
        return value if isinstance(value, str) else None

    def _time(self, key: str) -> float | None:
        return payload.timestamp(self.get(key))

    @property
    def value(self) -> str:
        """The stored payload as text."""
        return self.raw.decode("utf-8", "replace")

    @property
    def valid(self) -> bool:
        return self.error is None

    @property
    def jid(self) -> str | None:
        return self._text("jid")

    @property
    def klass(self) -> str | None:
        return self._text("class")

    @property
    def display_class(self) -> str | None:
        """The class a person would name: ActiveJob's wrapped class rather than its wrapper."""
        return self._text("display_class") or self._text("wrapped") or self.klass

    @property
    def args(self) -> list[Any]:
        args = self.get("args")
        return args if isinstance(args, list) else []

    @property
    def tags(self) -> list[str]:
        tags = self.get("tags")
        return [t for t in tags if isinstance(t, str)] if isinstance(tags, list) else []

    @property
    def created_at(self) -> float | None:
        return self._time("created_at")

    @property
    def enqueued_at(self) -> float | None:
        return self._time("enqueued_at")

    @property
    def failed_at(self) -> float | None:
        return self._time("failed_at")

    @property
    def retried_at(self) -> float | None:
        return self._time("retried_at")

    @property
    def retry_count(self) -> int | None:
        count = self.get("retry_count")
        return count if isinstance(count, int) and not isinstance(count, bool) else None

    @property
    def error_message(self) -> str | None:
        return self._text("error_message")

    @property
    def error_class(self) -> str | None:
        return self._text("error_class")

    @property
    def error_backtrace(self) -> list[str] | None:
        """The decompressed backtrace lines, or None if absent or unreadable."""
        packed = self._text("error_backtrace")
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
