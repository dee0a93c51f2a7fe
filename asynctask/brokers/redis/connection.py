"""Redis connections: bytes in, bytes out (payloads are decoded by ``payload.loads``)."""

from __future__ import annotations

import os
import select
import socket
import ssl
import struct
from collections.abc import Sequence
from functools import cache
from typing import Any

import hiredis
import redis
from redis._parsers import BaseParser

from asynctask.brokers.redis import sentinel
from asynctask.brokers.redis.replicas import ReplicatedRedis, check, min_replicas, wait_command

#: Seconds to wait for a connection; a down Redis is reported instead of hanging forever.
CONNECT_TIMEOUT = 5.0
#: Bytes asked of a push connection's socket per read: a push's replies are a few bytes each.
READ_SIZE = 65536
#: Seconds a reply may take beyond the longest a command blocks on purpose (BLMOVE's
#: timeout). A paused or unreachable server then fails the command instead of holding the
#: thread forever; a claim whose reply was lost this way is given back (``Fetcher.reconcile``).
REPLY_MARGIN = 10.0


def connect(
    url: str, *, max_connections: int | None = None, longest_block: float = 0.0, replicas: int = 0
) -> redis.Redis:
    """A client for ``url`` (of one server, or of the master Sentinel names in a
    ``redis+sentinel://`` URL); uses hiredis for parsing when installed (it is a dependency).

    ``longest_block``: the longest timeout of a blocking command sent on it, in seconds.
    ``replicas``: how many replicas each write waits for (``replicas.ReplicatedRedis``).
    Its connections are named after this process (``CLIENT LIST`` shows who is who), which
    also lets a worker find and unblock its own threads' BLMOVE when it goes quiet.
    """
    redis_class = ReplicatedRedis if replicas else redis.Redis
    settings: dict[str, Any] = {
        "socket_connect_timeout": CONNECT_TIMEOUT,
        "socket_timeout": longest_block + REPLY_MARGIN,
        "socket_keepalive": True,
        "health_check_interval": 30,
        "max_connections": max_connections,
        "client_name": f"asynctask:{socket.gethostname()}:{os.getpid()}",
        **_driver_info(),
    }
    if sentinel.is_sentinel_url(url):
        client = sentinel.master_client(url, redis_class, **settings)
    else:
        client = redis_class.from_url(url, **settings)
    if isinstance(client, ReplicatedRedis):
        client.min_replicas = replicas
    return client


class PlainRoundTrips:
    """Plain commands sent in one write and their replies read, on connections of their own: a
    push of queued jobs' path.

    redis-py's pipeline costs as much Python as the round trip itself; its pool's taking and
    giving back of a connection (a lock, a readiness check of three system calls, usage
    metrics) and its reply reading, a third of it. These connections are made with the pool's
    settings (and so connect, authenticate and select the database as redis-py does) but
    outside its count, taken from and given back to a list of idle ones: there are at most as
    many as threads that pushed at the same moment. Their replies are read from the socket
    redis-py opened (``Connection._sock``) by a hiredis reader of each round trip's own, errors
    made into redis-py's exceptions by redis-py's own rule. Every reply is read before a
    connection goes back, and one that failed half-way is dropped, so none ever holds a reply
    that is not its caller's.
    """

    def __init__(self, client: redis.Redis) -> None:
        self._pool = client.connection_pool
        self._idle: list[Any] = []
        self._forks = _forks

    def send(self, commands: Sequence[tuple[str | bytes | int | float, ...]]) -> list[Any]:
        """The replies of ``commands``, retried on a connection error as redis-py retries a
        pipeline; the first error reply (of any kind: a server still loading its data refuses a
        push as surely as a key of the wrong type) is raised once every reply is read."""
        if self._forks != _forks:
            # The parent's connections, which the parent goes on using.
            self._idle, self._forks = [], _forks
        try:
            connection = self._idle.pop()
        except IndexError:
            pool = self._pool
            connection = pool.connection_class(**pool.connection_kwargs)
        # hiredis's stub types a command as a tuple of one argument.
        packed = b"".join([hiredis.pack_command(command) for command in commands])  # type: ignore[arg-type]
        try:
            replies: list[Any] = connection.retry.call_with_retry(
                lambda: _exchange(connection, packed, len(commands)),
                lambda _error: connection.disconnect(),
            )
        except BaseException:
            connection.disconnect()
            raise
        self._idle.append(connection)
        for reply in replies:
            if isinstance(reply, redis.RedisError):
                raise reply
        return replies

    def close(self) -> None:
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.disconnect()


class ReplicatedRoundTrips(PlainRoundTrips):
    """``PlainRoundTrips`` whose writes wait for replicas (``replicas``): WAIT goes last in the
    same write, and too few replicas fail the send once every other reply passed."""

    def __init__(self, client: redis.Redis, replicas: int) -> None:
        super().__init__(client)
        self._wait = wait_command(replicas)

    def send(self, commands: Sequence[tuple[str | bytes | int | float, ...]]) -> list[Any]:
        replies = super().send([*commands, self._wait])
        check(replies.pop(), self._wait[1])
        return replies


def round_trips(client: redis.Redis) -> PlainRoundTrips:
    """The push connections of ``client``: waiting for replicas when its writes do."""
    replicas = min_replicas(client)
    return ReplicatedRoundTrips(client, replicas) if replicas else PlainRoundTrips(client)


def _exchange(connection: Any, packed: bytes, count: int) -> list[Any]:
    """Write ``packed`` and read ``count`` replies; error replies come back as redis-py's
    exceptions, raised by the caller once every reply is read."""
    sock = _open_socket(connection)
    replies = Replies(count)
    try:
        sock.sendall(packed)
        while not replies.complete():
            replies.feed(sock.recv(READ_SIZE))
    # A socket whose timeout the kernel keeps (see ``_kernel_timeouts``) reports it as EAGAIN.
    except (TimeoutError, BlockingIOError) as exc:
        raise redis.TimeoutError(f"Timeout reading from {connection!r}") from exc
    except OSError as exc:
        raise redis.ConnectionError(f"Error talking to {connection!r}: {exc}") from exc
    return replies.replies


class Replies:
    """The replies of ``count`` commands sent in one write, parsed by hiredis as their bytes
    come, error replies as redis-py's exceptions (returned, not raised)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.replies: list[Any] = []
        self._reader = hiredis.Reader(protocolError=redis.InvalidResponse, replyError=BaseParser.parse_error)

    def complete(self) -> bool:
        """Take every whole reply fed so far; whether all of them have come."""
        while len(self.replies) < self.count:
            reply = self._reader.gets()
            if reply is False:
                return False
            self.replies.append(reply)
        return True

    def feed(self, data: bytes) -> None:
        """Bytes read from the connection: none means the server closed it."""
        if not data:
            raise redis.ConnectionError("Connection closed by server.")
        self._reader.feed(data)


def _open_socket(connection: Any) -> socket.socket:
    """The connection's socket, connected again if the server closed it while it was idle: a
    push is never sent on a closed connection and retried, which could push it twice (redis-py's
    pool checks the same as it hands out a connection)."""
    sock: socket.socket | None = connection._sock
    if sock is not None:
        # Readable while idle is an end of file or a stray reply: never a state to push in. A
        # TLS socket may also hold decrypted bytes the system does not see.
        ready = select.poll()
        ready.register(sock, select.POLLIN)
        if not ready.poll(0) and not (isinstance(sock, ssl.SSLSocket) and sock.pending()):
            return sock
        connection.disconnect()
    connection.connect()
    opened: socket.socket = connection._sock
    if not isinstance(opened, ssl.SSLSocket):
        _kernel_timeouts(opened)
    return opened


def _kernel_timeouts(sock: socket.socket) -> None:
    """Have the kernel bound each read and write by the socket's timeout, and Python not.

    A socket with a timeout in Python polls before every send and every receive: two more
    system calls per round trip. A blocking socket whose kernel timeouts are set fails the same
    call at the same moment, with EAGAIN.
    TLS sockets keep Python's timeout: their reads and writes are not one system call each.
    """
    timeout = sock.gettimeout()
    if not timeout:
        # None blocks and 0 never does: neither is a bound the kernel could keep.
        return
    seconds = int(timeout)
    bound = struct.pack("ll", seconds, int((timeout - seconds) * 1_000_000))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, bound)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, bound)
    sock.settimeout(None)


#: Forks of this process so far: a child never sends on its parent's connections.
_forks = 0


def _forked() -> None:
    global _forks
    _forks += 1


os.register_at_fork(after_in_child=_forked)


@cache
def _driver_info() -> dict[str, Any]:
    """The client's name and version for ``CLIENT SETINFO``, read once per process: redis-py 7.1
    and later read its version from the package metadata for every new connection (about a
    millisecond, more than a job's own round trips), unless it is given."""
    try:
        from redis.driver_info import DriverInfo
    except ImportError:  # older redis-py reads it once, at import
        return {}
    return {"driver_info": DriverInfo()}


#: What tells two Redis clients' connections apart (where they connect, as whom, to which
#: database), with redis-py's values for those a URL leaves out.
_SERVER_DEFAULTS: dict[str, Any] = {
    "host": "localhost",
    "port": 6379,
    "path": None,
    "db": 0,
    "username": None,
    "password": None,
}


def same_database(one: redis.Redis, other: redis.Redis) -> bool:
    """Whether two clients connect to the same server and database, as the same user and over
    the same kind of connection (TCP, TLS or a Unix socket)."""
    first, second = one.connection_pool, other.connection_pool
    if first.connection_class is not second.connection_class:
        return False
    if sentinel.where(first) != sentinel.where(second):
        return False
    a, b = first.connection_kwargs, second.connection_kwargs
    return all(a.get(key, default) == b.get(key, default) for key, default in _SERVER_DEFAULTS.items())
