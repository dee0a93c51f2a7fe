"""Brokers: where jobs are stored. ``open_broker`` picks one by the settings' broker URL."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from asynctask.brokers.base import Beat, Broker, DueJobs, ProcessRecords, Staging
from asynctask.brokers.fetcher import Fetcher, UnitOfWork
from asynctask.settings import Settings

if TYPE_CHECKING:
    from asynctask.brokers.reads import ReadBackend
    from asynctask.brokers.redis import RedisBroker
    from asynctask.brokers.sql import SqlBroker
    from asynctask.tracking.additions import AdditionPusher
    from asynctask.tracking.callbacks import CallbackPusher
    from asynctask.tracking.parents import HoldReleaser

__all__ = [
    "Beat",
    "Broker",
    "DueJobs",
    "Fetcher",
    "ProcessRecords",
    "Staging",
    "UnitOfWork",
    "as_redis",
    "callback_pusher",
    "open_broker",
    "read_backend",
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


def read_backend(broker: Broker, settings: Settings) -> ReadBackend:
    """What the read model reads ``broker``'s store through, on the broker's own connections."""
    # Each backend's reads are loaded with it: a SQL broker's process never loads redis-py.
    if broker.backend == "redis":
        from asynctask.brokers.redis.reads import RedisReader

        redis_broker = cast("RedisBroker", broker)
        return RedisReader(redis_broker.redis, redis_broker.keys, settings)
    from asynctask.brokers.sql.reads import SqlReader

    return SqlReader(cast("SqlBroker", broker).engine, settings)


def callback_pusher(broker: Broker) -> CallbackPusher:
    """What pushes ``broker``'s due task callbacks (loaded only where tracking is: a Redis
    worker that never writes SQL never loads it)."""
    if broker.backend == "redis":
        from asynctask.brokers.redis.callbacks import RedisCallbackPusher

        redis_broker = cast("RedisBroker", broker)
        return RedisCallbackPusher(redis_broker.redis, redis_broker.keys)
    return cast("SqlBroker", broker).callback_pusher


def hold_releaser(broker: Broker) -> HoldReleaser:
    """What releases or drops the held jobs of ``broker``'s tasks whose parents ended (loaded
    only where tracking is, as ``callback_pusher``)."""
    if broker.backend == "redis":
        from asynctask.brokers.redis.holds import RedisHolds

        redis_broker = cast("RedisBroker", broker)
        return RedisHolds(redis_broker.redis, redis_broker.keys)
    return cast("SqlBroker", broker).holds


def addition_pusher(broker: Broker) -> AdditionPusher | None:
    """What pushes the jobs running jobs added to their tasks, once their SQL transaction
    committed; None for a broker whose jobs commit with it (a SQL broker's, which inserts them
    in that transaction)."""
    if broker.backend == "redis":
        from asynctask.brokers.redis.additions import RedisAdditionPusher

        redis_broker = cast("RedisBroker", broker)
        return RedisAdditionPusher(redis_broker.redis, redis_broker.keys)
    return None


def as_redis(broker: Broker) -> RedisBroker:
    """``broker``, which must be the Redis broker: AttributeError for another (a client's
    Sidekiq-level views, such as its Redis connection, exist on Redis alone)."""
    if broker.backend != "redis":
        raise AttributeError(f"the broker at {broker.settings.broker!r} is not Redis")
    return cast("RedisBroker", broker)
