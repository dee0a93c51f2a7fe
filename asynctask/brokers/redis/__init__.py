"""The Redis broker: Sidekiq's keys and payloads, plus reliable fetch."""

from asynctask.brokers.redis.broker import RedisBroker

__all__ = ["RedisBroker"]
