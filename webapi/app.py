"""The app factory: ``create_app()`` reads ``ASYNCTASK_*`` from the environment.

Serve it with ``asynctask api`` or any WSGI server: ``gunicorn 'webapi:create_app()'``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from flask import Flask, request
from prometheus_client import CollectorRegistry
from sqlalchemy import Engine

from asynctask.api import BusyKeys, PeriodicSet
from asynctask.client import Client
from asynctask.db.engine import autocommit, create_database_engine
from asynctask.modules import load_module
from asynctask.tasks.feedview import with_held
from asynctask.tasks.service import Tracking
from asynctask.tracking.cache import FirstErrorsCache
from webapi import errors
from webapi.auth import TokenVerifier, authenticate
from webapi.blueprints.docs import docs
from webapi.blueprints.health import health
from webapi.blueprints.jobs import jobs
from webapi.blueprints.keys import keys
from webapi.blueprints.metrics import metrics
from webapi.blueprints.page import page
from webapi.blueprints.periodic import periodic
from webapi.blueprints.queues import queues
from webapi.blueprints.stream import stream
from webapi.blueprints.tasks import tasks
from webapi.config import ApiConfig
from webapi.dashboard import dashboard
from webapi.dashboard.cookie import configure_session
from webapi.headers import add_security_headers, allow_cors
from webapi.metrics import BrokerCollector, TaskCollector
from webapi.requestmetrics import TimedRequests, request_durations
from webapi.resources import EXTENSION, Resources, broker_reader, release_db, resources
from webapi.streamslots import StreamSlots
from webapi.watch import TaskWatcher

logger = logging.getLogger("asynctask.api")

#: Blueprints whose routes need a token (the page, health checks and the document do not).
_PROTECTED = {tasks.name, stream.name, jobs.name, keys.name, periodic.name, queues.name, metrics.name}


#: Connections of the tracking database beyond the request threads: the stream watcher and the
#: metrics collectors read on threads of their own.
SPARE_CONNECTIONS = 4


def create_app(
    config: ApiConfig | Mapping[str, Any] | None = None,
    *,
    client: Client | None = None,
    engine: Engine | None = None,
) -> Flask:
    """``config``: an ``ApiConfig``, or a mapping of its fields over the environment's values.
    ``client`` and ``engine`` replace the ones built from the settings (tests, embedding)."""
    if config is None:
        config = ApiConfig.from_env()
    elif not isinstance(config, ApiConfig):
        config = ApiConfig.from_mapping(config)
    for module in config.settings.require:
        load_module(module)
    if engine is None:
        # No pre-ping: it would add a round trip to every request. After a database restart
        # the first request on each stale connection fails (503) and the pool replaces it.
        # A request holds one connection at a time: one per thread, and a few for the stream
        # watcher and the metrics, never wait for each other.
        engine = create_database_engine(
            config.settings.database_url,
            pool_pre_ping=False,
            pool_size=config.threads + SPARE_CONNECTIONS,
            max_overflow=0,
            pool_timeout=config.pool_timeout,
        )
    if client is None:
        # A SQL broker's pool is sized from its concurrency: here, every request thread may
        # hold one of its connections (a task's jobs, a queue read) beside one of the engine's.
        client = Client(replace(config.settings, concurrency=config.threads))
    if not config.auth:
        logger.warning(
            "API authentication is OFF: every caller acts as the tenant-less user (development only)"
        )

    app = Flask(__name__, static_folder="static", static_url_path="/static")
    registry = _metrics(client, engine)
    app.config["MAX_CONTENT_LENGTH"] = config.max_body_bytes
    app.extensions[EXTENSION] = Resources(
        config=config,
        client=client,
        engine=engine,
        # Every read of a request is one statement or a few independent ones (a task row, then
        # its first errors): no transaction is needed, and none costs two round trips.
        reader=autocommit(engine),
        tracking=Tracking(client, engine),
        tokens=TokenVerifier(config.token_cache_seconds),
        errors=FirstErrorsCache(config.errors_cache_seconds),
        watcher=TaskWatcher(engine, config.stream_interval, lambda view: with_held(view, client)),
        streams=StreamSlots(config.max_streams, config.max_tenant_streams),
        busy_keys=broker_reader(BusyKeys, client),
        periodic=broker_reader(PeriodicSet, client),
        metrics=registry,
    )

    configure_session(app, config)
    errors.register(app)
    app.before_request(_authenticate)
    for blueprint in (health, docs, page, tasks, stream, jobs, keys, periodic, queues, metrics, dashboard):
        app.register_blueprint(blueprint)
    app.teardown_appcontext(_close_db)
    add_security_headers(app)
    if config.cors_origins:
        allow_cors(app, config.cors_origins)
    # Outermost, so that a request's time includes every hook and handler Flask runs for it.
    app.wsgi_app = TimedRequests(app.wsgi_app, request_durations(registry))  # type: ignore[method-assign]
    return app


def _metrics(client: Client, engine: Engine) -> CollectorRegistry:
    # A registry of the app's own, not prometheus_client's global one: two apps in a process
    # (tests, embedding) each report their own broker, database and requests.
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(client.settings))
    registry.register(TaskCollector(autocommit(engine)))
    return registry


def _authenticate() -> None:
    # A CORS preflight carries no credentials by design.
    if request.blueprint not in _PROTECTED or request.method == "OPTIONS":
        return
    found = resources()
    authenticate(found.config.auth, found.tokens, found.reader)


def _close_db(_exc: BaseException | None) -> None:
    release_db()
