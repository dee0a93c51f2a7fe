"""Redis connections: bytes in, bytes out (payloads are decoded by ``payload.loads``)."""

from __future__ import annotations

import os
import socket

import redis

#: Seconds to wait for a connection; a down Redis is reported instead of hanging forever.
CONNECT_TIMEOUT = 5.0


def connect(url: str, *, max_connections: int | None = None) -> redis.Redis:
    """A client for ``url``; uses hiredis for parsing when installed (it is a dependency).

    Its connections are named after this process (``CLIENT LIST`` shows who is who), which
    also lets a worker find and unblock its own threads' BLMOVE when it goes quiet.
    """
    return redis.Redis.from_url(
        url,
        socket_connect_timeout=CONNECT_TIMEOUT,
        socket_keepalive=True,
        health_check_interval=30,
        max_connections=max_connections,
        client_name=f"asynctask:{socket.gethostname()}:{os.getpid()}",
    )
