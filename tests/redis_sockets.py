"""A real Redis connection whose socket a test watches: the writes it sends, and a read made to
fail, as a connection cut or interrupted mid-reply would."""

from __future__ import annotations

import socket
from typing import Any

import redis


class WatchedSocket:
    """A connected socket that counts its writes and can fail its next reads or writes."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def sendall(self, data: Any, *args: Any) -> None:
        WatchedConnection.writes += 1
        if WatchedConnection.fail_writes:
            WatchedConnection.fail_writes -= 1
            # Inside the first command: the server has nothing to answer yet, and waits for more.
            self._sock.sendall(data[:10], *args)
            raise RuntimeError("interrupted in the middle of a write")
        self._sock.sendall(data, *args)

    def recv(self, size: int, *args: Any) -> bytes:
        if WatchedConnection.fail_reads:
            WatchedConnection.fail_reads -= 1
            raise RuntimeError("interrupted before the replies were read")
        return self._sock.recv(size, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class WatchedConnection(redis.Connection):
    """Counts, over every connection of the class, the writes their sockets sent and the
    connections made; the next ``fail_reads`` reads fail (redis-py's handshake reads too), and
    the next ``fail_writes`` writes after sending their first bytes."""

    writes = 0
    made = 0
    fail_reads = 0
    fail_writes = 0

    def _connect(self) -> Any:
        WatchedConnection.made += 1
        return WatchedSocket(super()._connect())  # type: ignore[no-untyped-call]

    @classmethod
    def reset(cls) -> None:
        cls.writes = cls.made = cls.fail_reads = cls.fail_writes = 0
