"""Redis behind Sentinel: ``redis+sentinel://`` URLs, and clients of the master they name.

``redis+sentinel://[user:password@]host[:port][,host[:port]...]/service[/db][?sentinel_password=...]``
lists Sentinels (port 26379 when left out), the name they monitor the master by, and the
database. The user and password are the master's; ``sentinel_password`` is the Sentinels' own,
when they require one.

A client of the master asks a Sentinel where the master is each time it opens a connection
(redis-py's Sentinel pools): once a failover promoted a replica, every connection opened after
the old master's failed goes to the new one, with no restart. Sentinel closes the clients of a
master it turns into a replica, so none goes on talking to it.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote

import redis
import redis.sentinel

from asynctask.errors import InvalidSetting

logger = logging.getLogger("asynctask.broker")

SCHEME = "redis+sentinel"
#: Sentinel's own port, for a host given without one.
DEFAULT_PORT = 26379
#: Seconds a Sentinel may take to answer where the master is before the next one is asked.
SENTINEL_TIMEOUT = 2.0


@dataclass(frozen=True)
class SentinelURL:
    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    sentinel_password: str | None = field(default=None, repr=False)

    def sentinel_settings(self) -> dict[str, Any]:
        """How to connect to a Sentinel: its own password, and a bound on its answer."""
        return {
            "password": self.sentinel_password,
            "socket_connect_timeout": SENTINEL_TIMEOUT,
            "socket_timeout": SENTINEL_TIMEOUT,
        }

    def master_settings(self) -> dict[str, Any]:
        return {"db": self.db, "username": self.username, "password": self.password}


def is_sentinel_url(url: str) -> bool:
    return url.partition("://")[0].lower() == SCHEME


def parse(url: str) -> SentinelURL:
    """The parts of a ``redis+sentinel://`` URL; ``InvalidSetting`` says what is wrong with one
    that does not parse (without the URL itself, which may hold a password)."""
    rest = url.partition("://")[2]
    location, _, query = rest.partition("?")
    netloc, _, path = location.partition("/")
    userinfo, _, hosts = netloc.rpartition("@")
    username, _, password = userinfo.partition(":")
    service, _, db = path.strip("/").partition("/")
    if not hosts or not service:
        raise InvalidSetting(
            f"a {SCHEME}:// URL names its Sentinels and the master's service: "
            f"{SCHEME}://host:26379,host:26379/service/0",
            setting="redis_url",
        )
    try:
        sentinels = tuple(_address(host) for host in hosts.split(","))
        database = int(db) if db else 0
    except ValueError:
        raise InvalidSetting(
            f"a {SCHEME}:// URL's ports and database are numbers: {SCHEME}://host:26379/service/0",
            setting="redis_url",
        ) from None
    options = parse_qs(query)
    unknown = sorted(set(options) - {"sentinel_password"})
    if unknown:
        raise InvalidSetting(
            f"a {SCHEME}:// URL takes only sentinel_password as an option, not {', '.join(unknown)}",
            setting="redis_url",
        )
    return SentinelURL(
        sentinels,
        unquote(service),
        database,
        unquote(username) or None,
        unquote(password) or None,
        options["sentinel_password"][-1] if "sentinel_password" in options else None,
    )


def _address(text: str) -> tuple[str, int]:
    host, colon, port = text.strip().rpartition(":")
    if not colon:
        return text.strip(), DEFAULT_PORT
    if not host:
        raise ValueError(text)
    return host.strip("[]"), int(port)


class MasterMoves:
    """The master address a client last found, and one log line when it moves."""

    def __init__(self, service: str) -> None:
        self.service = service
        self._address: tuple[str, int] | None = None
        self._lock = threading.Lock()

    def found(self, address: tuple[str, int]) -> None:
        with self._lock:
            before, self._address = self._address, address
        if before is not None and before != address:
            logger.warning(
                "the Redis master moved: Sentinel now names %s:%s",
                *address,
                extra={"fields": {"service": self.service, "before": f"{before[0]}:{before[1]}"}},
            )


class Sentinels(redis.sentinel.Sentinel):
    """redis-py's client of the Sentinels, which logs each move of the master once."""

    def __init__(self, parsed: SentinelURL) -> None:
        super().__init__(list(parsed.sentinels), sentinel_kwargs=parsed.sentinel_settings())  # type: ignore[no-untyped-call]
        self.moves = MasterMoves(parsed.service)
        self.parsed = parsed

    def discover_master(self, service_name: str) -> tuple[str, int]:
        try:
            address: tuple[str, int] = super().discover_master(service_name)  # type: ignore[no-untyped-call]
        except redis.sentinel.MasterNotFoundError as exc:
            raise no_master(self.parsed) from exc
        self.moves.found(address)
        return address


def no_master(parsed: SentinelURL) -> redis.sentinel.MasterNotFoundError:
    """redis-py's error, in one line: its own message holds each Sentinel client's whole repr."""
    hosts = ", ".join(f"{host}:{port}" for host, port in parsed.sentinels)
    return redis.sentinel.MasterNotFoundError(
        f"no Sentinel names a master {parsed.service!r} (asked {hosts})"
    )


class SentinelPool(redis.sentinel.SentinelConnectionPool):
    """redis-py's pool of a Sentinel's master, which also closes its connections to the
    Sentinels when its client closes it (``inuse_connections``: a close, not the reconnection
    to a new master)."""

    def disconnect(self, inuse_connections: bool = True) -> None:
        super().disconnect(inuse_connections)
        if inuse_connections:
            for node in self.sentinel_manager.sentinels:
                node.close()


def master_client(url: str, redis_class: type[redis.Redis] = redis.Redis, **settings: Any) -> redis.Redis:
    """A client of the master ``url`` names, its connections made with ``settings``."""
    parsed = parse(url)
    manager = Sentinels(parsed)
    client: redis.Redis = manager.master_for(  # type: ignore[no-untyped-call]
        parsed.service,
        redis_class=redis_class,
        connection_pool_class=SentinelPool,
        **parsed.master_settings(),
        **settings,
    )
    return client


def where(pool: redis.ConnectionPool) -> tuple[Any, ...] | None:
    """The Sentinels and service a pool's connections go to; None for a pool of one server."""
    if not isinstance(pool, redis.sentinel.SentinelConnectionPool):
        return None
    sentinels = sorted(
        (s.connection_pool.connection_kwargs.get("host"), s.connection_pool.connection_kwargs.get("port"))
        for s in pool.sentinel_manager.sentinels
    )
    return (pool.service_name, tuple(sentinels))
