"""The SQL broker: jobs in one table of SQLite or PostgreSQL, next to the tracking tables."""

from asynctask.brokers.sql.broker import SqlBroker

__all__ = ["SqlBroker"]
