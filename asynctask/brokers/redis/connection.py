"""Redis connections: bytes in, bytes out (payloads are decoded by ``payload.loads``)."""

from __future__ import annotations

import os
import socket

import redis

#: Seconds to wait for a connection; a down Redis is reported instead of hanging forever.
CONNECT_TIMEOUT = 5.0
#: Seconds a reply may take beyond the longest a command blocks on purpose (BLMOVE's
#: timeout). A paused or unreachable server then fails the command instead of holding the
#: thread forever; a claim whose reply was lost this way is given back (``Fetcher.reconcile``).
REPLY_MARGIN = 10.0


def connect(url: str, *, max_connections: int | None = None, longest_block: float = 0.0) -> redis.Redis:
    """A client for ``url``; uses hiredis for parsing when installed (it is a dependency).

    ``longest_block``: the longest timeout of a blocking command sent on it, in seconds.
    Its connections are named after this process (``CLIENT LIST`` shows who is who), which
    also lets a worker find and unblock its own threads' BLMOVE when it goes quiet.
    """
    return redis.Redis.from_url(
        url,
        socket_connect_timeout=CONNECT_TIMEOUT,
        socket_timeout=longest_block + REPLY_MARGIN,
        socket_keepalive=True,
        health_check_interval=30,
        max_connections=max_connections,
        client_name=f"asynctask:{socket.gethostname()}:{os.getpid()}",
    )
