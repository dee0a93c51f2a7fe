"""Where the read model reads from: a backend over the broker's store, and the settings.

The backend is picked by the settings' broker URL: Redis (a connection and the key names)
or SQL (an engine on the broker database). Connections opened from a URL are shared by
every reader of that URL in the process, so ``Queue("x")`` does not open a pool each time.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Self

from redis import Redis
from sqlalchemy import Engine

from asynctask.brokers import read_backend
from asynctask.brokers.reads import ReadBackend
from asynctask.brokers.redis.connection import connect
from asynctask.client import Client, default_client
from asynctask.db.engine import create_database_engine
from asynctask.keys import Keys
from asynctask.settings import Settings

_shared_lock = threading.Lock()
_shared_redis: dict[str, Redis] = {}
_shared_engines: dict[str, Engine] = {}


@dataclass(frozen=True, slots=True)
class Context:
    backend: ReadBackend
    settings: Settings

    @classmethod
    def resolve(
        cls, connection: Redis | None = None, keys: Keys | None = None, settings: Settings | None = None
    ) -> Context:
        """Fill in what is not given.

        With neither a connection nor settings, the default client's settings (and, on
        Redis, its connection) are used, so ``Queue("default")`` works as in Sidekiq. A
        connection is a Redis connection: keys default to the settings' namespace, and a bare
        connection without settings or keys means no namespace. Settings alone open (once per
        URL) a connection to their broker: Redis, or the SQL database.
        """
        # Imported here: each backend's reads are loaded when used, as its broker is.
        from asynctask.brokers.redis.reads import RedisReader
        from asynctask.brokers.sql.reads import SqlReader

        if connection is None and settings is None:
            return of_client(default_client())
        settings = settings or Settings()
        if connection is None and not settings.uses_redis:
            if keys is not None:
                raise ValueError(f"keys name Redis keys, but the broker {settings.broker!r} is SQL")
            return cls(SqlReader(shared_engine(settings.broker), settings), settings)
        if connection is None:
            connection = shared_redis(settings.broker)
        return cls(RedisReader(connection, keys or Keys(settings.namespace), settings), settings)


def of_client(client: Client) -> Context:
    """The context of a client's own broker: its Redis connection and keys, or its SQL engine
    (a reader then takes its connections from the broker's pool, not from one of its own)."""
    return Context(read_backend(client.broker, client.settings), client.settings)


class Reader:
    """Base of the read-model classes: what they read from, resolved once."""

    def __init__(
        self,
        connection: Redis | None = None,
        keys: Keys | None = None,
        *,
        settings: Settings | None = None,
    ) -> None:
        self.context = Context.resolve(connection, keys, settings)
        self._bound()

    @classmethod
    def over(cls, context: Context) -> Self:
        """A reader of an already resolved ``context``."""
        reader = cls.__new__(cls)
        reader.context = context
        reader._bound()
        return reader

    def _bound(self) -> None:
        """Set up what a reader derives from its context, however it was made."""

    @property
    def backend(self) -> ReadBackend:
        return self.context.backend


def shared_redis(url: str) -> Redis:
    """The process's Redis connection pool for ``url``, opened on first use."""
    with _shared_lock:
        if url not in _shared_redis:
            _shared_redis[url] = connect(url)
        return _shared_redis[url]


def shared_engine(url: str) -> Engine:
    """The process's engine (and pool) for the SQL broker at ``url``, created on first use."""
    with _shared_lock:
        if url not in _shared_engines:
            _shared_engines[url] = create_database_engine(url)
        return _shared_engines[url]


def close_shared() -> None:
    """Close every connection the readers opened from a URL; the next reader opens new ones.

    Readers of a URL share its pool for the life of the process: a process (a test suite, say)
    done with a database calls this so that its idle connections do not pile up."""
    with _shared_lock:
        redis_clients = list(_shared_redis.values())
        engines = list(_shared_engines.values())
        _shared_redis.clear()
        _shared_engines.clear()
    for client in redis_clients:
        client.close()
    for engine in engines:
        engine.dispose()
