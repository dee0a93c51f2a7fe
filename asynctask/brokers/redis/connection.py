"""Redis connections: bytes in, bytes out (payloads are decoded by ``payload.loads``)."""

from __future__ import annotations

import redis

#: Seconds to wait for a connection; a down Redis is reported instead of hanging forever.
CONNECT_TIMEOUT = 5.0


def connect(url: str, *, max_connections: int | None = None) -> redis.Redis:
    """A client for ``url``; uses hiredis for parsing when installed (it is a dependency)."""
    return redis.Redis.from_url(
        url,
        socket_connect_timeout=CONNECT_TIMEOUT,
        socket_keepalive=True,
        health_check_interval=30,
        max_connections=max_connections,
    )
