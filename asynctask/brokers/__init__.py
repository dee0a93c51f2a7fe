"""Brokers: where jobs are stored. ``open_broker`` picks one by the settings' broker URL."""

from __future__ import annotations

from typing import Any

from asynctask.brokers.base import Beat, Broker, DueJobs, Fetcher, ProcessRecords, Staging, UnitOfWork
from asynctask.settings import Settings

__all__ = [
    "Beat",
    "Broker",
    "DueJobs",
    "Fetcher",
    "ProcessRecords",
    "Staging",
    "UnitOfWork",
    "open_broker",
]


def open_broker(settings: Settings, connection: Any = None) -> Broker:
    """The Redis broker for ``redis://`` URLs, the SQL broker for ``sqlite:///`` and
    ``postgresql://`` ones. ``connection``: a Redis client or SQLAlchemy engine to use instead
    of opening one (the caller keeps closing it); a Redis client means the Redis broker."""
    if settings.uses_redis or _is_redis_client(connection):
        from asynctask.brokers.redis import RedisBroker

        return RedisBroker(settings, connection)
    from asynctask.brokers.sql import SqlBroker

    return SqlBroker(settings, connection)


def _is_redis_client(connection: Any) -> bool:
    # redis-py is loaded only to answer for a connection given: it takes a tenth of a second,
    # which a SQL worker never needs.
    if connection is None:
        return False
    from redis import Redis

    return isinstance(connection, Redis)
