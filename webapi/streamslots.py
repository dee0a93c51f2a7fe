"""Caps on open progress streams.

A stream holds a server thread for as long as it is open. Without a cap, a few hundred open
streams take every thread and nothing else is answered, ``/healthz`` included. A process holds
at most ``max_streams`` (its other threads stay free for ordinary requests) and a tenant at
most ``max_tenant_streams`` of them; a stream over a cap is refused at once, with a
``Retry-After``.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

from webapi.errors import ApiError, limit_exceeded

#: Seconds a refused client is asked to wait before it tries again.
RETRY_AFTER = 5


class StreamSlots:
    def __init__(self, per_process: int, per_tenant: int) -> None:
        self.per_process = per_process
        self.per_tenant = per_tenant
        self._lock = threading.Lock()
        self._open = 0
        self._by_tenant: Counter[str | None] = Counter()

    def acquire(self, tenant: str | None) -> Callable[[], None]:
        """Take a slot for ``tenant``'s stream, or raise 429 (the tenant's cap) or 503 (the
        process's); returns the function that gives it back (once, however often called)."""
        with self._lock:
            if self._by_tenant[tenant] >= self.per_tenant:
                raise _refused(
                    429,
                    "too_many_streams",
                    "max_tenant_streams",
                    self.per_tenant,
                    f"this tenant already has {self.per_tenant} progress streams open in this "
                    "server process; close one, or poll GET /api/tasks/<id>",
                )
            if self._open >= self.per_process:
                raise _refused(
                    503,
                    "streams_unavailable",
                    "max_streams",
                    self.per_process,
                    "this server process has no room for another progress stream; "
                    "try again later, or poll GET /api/tasks/<id>",
                )
            self._open += 1
            self._by_tenant[tenant] += 1
        released = False

        def release() -> None:
            nonlocal released
            with self._lock:
                if released:
                    return
                released = True
                self._open -= 1
                self._by_tenant[tenant] -= 1
                if not self._by_tenant[tenant]:
                    del self._by_tenant[tenant]

        return release

    @property
    def open(self) -> int:
        with self._lock:
            return self._open


def _refused(status: int, code: str, limit: str, maximum: int, message: str) -> ApiError:
    error = limit_exceeded(status, code, limit, maximum, message)
    error.headers["Retry-After"] = str(RETRY_AFTER)
    return error


def stream_cap(max_streams: int, threads: int) -> int:
    """The streams a process of ``threads`` threads may hold: a quarter of its threads (at least
    two) always stay free for ordinary requests."""
    reserved = max(2, threads // 4)
    return max(0, min(max_streams, threads - reserved))
