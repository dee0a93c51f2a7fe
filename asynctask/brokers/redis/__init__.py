"""The Redis broker: Sidekiq's keys and payloads, plus reliable fetch."""

from asynctask.brokers.redis.broker import RedisBroker
from asynctask.brokers.redis.fetch import UnitOfWork

__all__ = ["RedisBroker", "UnitOfWork"]
