"""What the app's requests share (config, Redis client, engine, token check, stream watcher and slots),
kept in ``app.extensions``, and the request's own database connection."""

from __future__ import annotations

from dataclasses import dataclass

from flask import current_app, g
from sqlalchemy import Connection, Engine

from asynctask.api import BusyKeys
from asynctask.client import Client
from asynctask.tasks.service import Tracking
from asynctask.tracking.cache import FirstErrorsCache
from webapi.auth import TokenVerifier
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
    tokens: TokenVerifier
    errors: FirstErrorsCache
    watcher: TaskWatcher
    streams: StreamSlots
    busy_keys: BusyKeys


def resources() -> Resources:
    found: Resources = current_app.extensions[EXTENSION]
    return found


def db() -> Connection:
    """The request's connection, opened on first use and closed when the request ends."""
    connection: Connection | None = g.get("db")
    if connection is None:
        connection = resources().reader.connect()
        g.db = connection
    return connection


def release_db() -> None:
    """Give the connection back now (a stream outlives its request's reads by minutes)."""
    connection: Connection | None = g.pop("db", None)
    if connection is not None:
        connection.close()
