"""Where the read model reads from: one Redis connection, the key names and the settings."""

from __future__ import annotations

from dataclasses import dataclass

from redis import Redis

from asynctask.brokers.redis.connection import connect
from asynctask.client import default_client
from asynctask.keys import Keys
from asynctask.settings import Settings


@dataclass(frozen=True, slots=True)
class Context:
    redis: Redis
    keys: Keys
    settings: Settings

    @classmethod
    def resolve(
        cls, connection: Redis | None = None, keys: Keys | None = None, settings: Settings | None = None
    ) -> Context:
        """Fill in what is not given.

        With neither a connection nor settings, the default client's (``asynctask.configure``)
        are used, so ``Queue("default")`` works as in Sidekiq. Keys default to the settings'
        namespace; a bare connection without settings or keys means no namespace.
        """
        if connection is None and settings is None:
            client = default_client()
            return cls(client.redis, keys or client.keys, client.settings)
        settings = settings or Settings()
        if connection is None:
            connection = connect(settings.redis_url)
        return cls(connection, keys or Keys(settings.namespace), settings)


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


def as_bytes(value: bytes | str) -> bytes:
    """Replies are bytes unless the caller's connection was made with ``decode_responses=True``."""
    return value if isinstance(value, bytes) else value.encode()


def as_text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
