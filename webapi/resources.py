"""What the app's requests share (config, Redis client, engine, authentication, stream watcher and
slots, the broker's readers), kept in ``app.extensions``, and the request's own database connection."""

from __future__ import annotations

from dataclasses import dataclass

from flask import current_app, g
from prometheus_client import CollectorRegistry
from sqlalchemy import Connection, Engine

from asynctask.api import BusyKeys, PeriodicSet
from asynctask.api.reader import Context
from asynctask.client import Client
from asynctask.tasks.service import Tracking
from asynctask.tracking.cache import FirstErrorsCache
from webapi.auth import Authenticate
from webapi.config import ApiConfig
from webapi.streamslots import StreamSlots
from webapi.watch import TaskWatcher

EXTENSION = "asynctask"


@dataclass(frozen=True)
class Resources:
    config: ApiConfig
    client: Client
    engine: Engine
    #: ``engine`` (same pool) for reads outside a transaction.
    reader: Engine
    tracking: Tracking
    #: Names each request's caller; None when authentication is off (``ApiConfig.auth``).
    authenticate: Authenticate | None
    errors: FirstErrorsCache
    watcher: TaskWatcher
    streams: StreamSlots
    #: The client's broker as the read model reads it (``of_client``: its Redis connection, or
    #: its SQL engine, whose pool the readers share), resolved once.
    broker_context: Context
    busy_keys: BusyKeys
    periodic: PeriodicSet
    #: What ``/metrics`` reports, read at each scrape.
    metrics: CollectorRegistry
    #: Where the API is mounted in its app: "" or a path such as "/jobs".
    url_prefix: str
    #: Signs the dashboard's cookie: ``ApiConfig.secret_key``, or one made for this app.
    secret_key: str


def resources() -> Resources:
    found: Resources = current_app.extensions[EXTENSION]
    return found


def db() -> Connection:
    """The request's connection, opened on first use and closed when the request ends."""
    # A name of its own in ``g``: the app mounting the API may keep its own ``g.db``.
    connection: Connection | None = g.get("asynctask_db")
    if connection is None:
        connection = resources().reader.connect()
        g.asynctask_db = connection
    return connection


def release_db() -> None:
    """Give the connection back now (a stream outlives its request's reads by minutes)."""
    connection: Connection | None = g.pop("asynctask_db", None)
    if connection is not None:
        connection.close()
