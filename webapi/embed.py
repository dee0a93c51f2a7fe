"""Mounting the API in a Flask app: ``init_app(app, ...)`` adds its routes (the JSON API, the
example page, and the dashboard if asked) under a URL prefix, with an authentication of the app's
choosing. ``create_app`` does the same on an app of the API's own.

Everything the API adds to a request is scoped to its own routes, all inside one blueprint
(``asynctask``): its error bodies, its security and CORS headers, its body limit
(``max_body_bytes``), its authentication, the dashboard's cookie. The app keeps its own error
handlers, hooks, secret key, session and cookie settings, ``MAX_CONTENT_LENGTH``, templates,
filters and static files; its ``g`` holds the API's values under ``asynctask_*`` names only.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from flask import Blueprint, Flask, request
from prometheus_client import CollectorRegistry
from sqlalchemy import Engine

from asynctask.api import BusyKeys, PeriodicSet
from asynctask.api.reader import of_client
from asynctask.client import Client
from asynctask.db.engine import autocommit, create_database_engine
from asynctask.modules import load_module
from asynctask.settings import Settings
from asynctask.tasks.feedview import with_held
from asynctask.tasks.service import Tracking
from asynctask.tracking.cache import FirstErrorsCache
from webapi import errors
from webapi.auth import Authenticate, TokenVerifier, sign_in
from webapi.blueprints.docs import docs
from webapi.blueprints.health import health
from webapi.blueprints.jobs import jobs
from webapi.blueprints.keys import keys
from webapi.blueprints.metrics import metrics
from webapi.blueprints.page import page as example_page
from webapi.blueprints.periodic import periodic
from webapi.blueprints.queues import queues
from webapi.blueprints.stream import stream
from webapi.blueprints.tasks import tasks
from webapi.config import ApiConfig
from webapi.dashboard import dashboard as operators_dashboard
from webapi.headers import add_security_headers, allow_cors
from webapi.metrics import BrokerCollector, TaskCollector
from webapi.requestmetrics import TimedRequests, request_durations
from webapi.resources import EXTENSION, Resources, release_db, resources
from webapi.streamslots import StreamSlots
from webapi.watch import TaskWatcher

logger = logging.getLogger("asynctask.api")

#: The blueprint holding every route of the API; its routes' endpoints are ``asynctask.<name>.*``.
BLUEPRINT = "asynctask"

#: Blueprints whose routes need a caller (the page, health checks and the document do not; the
#: dashboard has its own guard).
_PROTECTED = {
    f"{BLUEPRINT}.{blueprint.name}" for blueprint in (tasks, stream, jobs, keys, periodic, queues, metrics)
}

#: Connections of the tracking database beyond the request threads: the stream watcher and the
#: metrics collectors read on threads of their own, and a request creating a task for a tenant on
#: a SQL broker takes its turns in a statement committed apart from the task's transaction.
SPARE_CONNECTIONS = 4


def most_connections(settings: Settings, threads: int) -> dict[str, int]:
    """The most connections one API process's pool holds, per database URL: a SQL broker
    shares the tracking database's engine (``mount``)."""
    return {settings.database_url: threads + SPARE_CONNECTIONS}


def init_app(
    app: Flask,
    config: ApiConfig | Mapping[str, Any] | None = None,
    *,
    url_prefix: str = "",
    authenticate: Authenticate | None = None,
    client: Client | None = None,
    engine: Engine | None = None,
    page: bool = True,
    dashboard: bool = False,
) -> None:
    """Mount the API in ``app`` under ``url_prefix`` (``"/jobs"``: its routes are ``/jobs/api/...``,
    the example page ``/jobs/``, the dashboard ``/jobs/dashboard/``).

    ``config``: an ``ApiConfig``, or a mapping of its fields over the environment's values.
    ``authenticate`` names each request's caller from the app's own login (a session, a JWT, API
    keys); None keeps the built-in bearer tokens. ``client`` and ``engine`` replace the ones built
    from the settings. ``page`` and ``dashboard`` mount the example page and the operators'
    dashboard. Raises ValueError if one of the API's routes is one the app serves already."""
    mount(
        app,
        config,
        url_prefix=url_prefix,
        authenticate=authenticate,
        client=client,
        engine=engine,
        page=page,
        dashboard=dashboard,
    )


def mount(
    app: Flask,
    config: ApiConfig | Mapping[str, Any] | None,
    *,
    url_prefix: str = "",
    authenticate: Authenticate | None = None,
    client: Client | None = None,
    engine: Engine | None = None,
    page: bool = True,
    dashboard: bool = False,
    own_app: bool = False,
) -> None:
    """``init_app``; with ``own_app``, ``app`` is the API's alone (``create_app``), and a request
    that matches none of its routes is answered, and timed, as the API's."""
    if EXTENSION in app.extensions:
        raise RuntimeError("the API is mounted in this app already")
    config = _config(config)
    prefix = _prefix(url_prefix)
    if authenticate is not None and not config.auth:
        raise ValueError("authentication is off (auth=False): an authenticate callable would not be called")
    for module in config.settings.require:
        load_module(module)
    own_engine = engine is None
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
        # A SQL broker lives in the tracking database: sharing its engine keeps the process at
        # one connection per request thread, where a pool of the broker's own would double what
        # the server is asked for (two processes of 32 threads: 152 against PostgreSQL's 100).
        # A request holds one connection, and a second only for a statement that waits on
        # nothing (a tenant's turns): the spare connections let those through.
        shared = engine if own_engine and not config.settings.uses_redis else None
        client = Client(replace(config.settings, concurrency=config.threads), connection=shared)
    # Every read of a request is one statement or a few independent ones (a task row, then its
    # first errors): no transaction is needed, and none costs two round trips.
    reader = autocommit(engine)
    if not config.auth:
        logger.warning(
            "API authentication is OFF: every caller acts as the tenant-less user (development only)"
        )
    elif authenticate is None:
        authenticate = TokenVerifier(reader, config.token_cache_seconds)
    if dashboard and config.secret_key is None and config.auth:
        logger.warning(
            "ASYNCTASK_API_SECRET_KEY is not set: dashboard logins and forms last until this process "
            "ends, and work only if one process serves them"
        )

    api = _blueprint(config, page=page, dashboard=dashboard)
    app.register_blueprint(api, url_prefix=prefix or None)
    _refuse_shadowed_routes(app)
    registry = _metrics(client, engine)
    context = of_client(client)
    app.extensions[EXTENSION] = Resources(
        config=config,
        client=client,
        engine=engine,
        reader=reader,
        tracking=Tracking(client, engine),
        authenticate=authenticate,
        errors=FirstErrorsCache(config.errors_cache_seconds),
        watcher=TaskWatcher(engine, config.stream_interval, lambda view: with_held(view, client)),
        streams=StreamSlots(config.max_streams, config.max_tenant_streams),
        broker_context=context,
        busy_keys=BusyKeys.over(context),
        periodic=PeriodicSet.over(context),
        metrics=registry,
        url_prefix=prefix,
        secret_key=config.secret_key or secrets.token_urlsafe(32),
    )
    # Touches the API's own connection only (``g.asynctask_db``).
    app.teardown_appcontext(_close_db)
    if own_app:
        # A request that matches no route reaches no blueprint: the app answers it as the API would.
        errors.register(app)
        add_security_headers(app)
        if config.cors_origins:
            allow_cors(app, config.cors_origins)
    # Outermost, so that a request's time includes every hook and handler Flask runs for it.
    durations = request_durations(registry)
    app.wsgi_app = TimedRequests(app.wsgi_app, durations, BLUEPRINT, unmatched=own_app)  # type: ignore[method-assign]


def _config(config: ApiConfig | Mapping[str, Any] | None) -> ApiConfig:
    if config is None:
        return ApiConfig.from_env()
    if isinstance(config, ApiConfig):
        return config
    return ApiConfig.from_mapping(config)


def _prefix(url_prefix: str) -> str:
    prefix = url_prefix.rstrip("/")
    if prefix and not prefix.startswith("/"):
        raise ValueError(f"url_prefix must start with a slash, as /jobs does, not {url_prefix!r}")
    return prefix


def _blueprint(config: ApiConfig, *, page: bool, dashboard: bool) -> Blueprint:
    """A blueprint of this app's own holding the API's: its hooks and handlers apply to them
    all, and to nothing else of the app."""
    api = Blueprint(BLUEPRINT, __name__)
    api.before_request(_limit_body)
    api.before_request(_authenticate)
    errors.register(api)
    add_security_headers(api)
    if config.cors_origins:
        allow_cors(api, config.cors_origins)
    mounted = [health, docs, tasks, stream, jobs, keys, periodic, queues, metrics]
    if page:
        mounted.append(example_page)
    if dashboard:
        mounted.append(operators_dashboard)
    for blueprint in mounted:
        api.register_blueprint(blueprint)
    return api


def _limit_body() -> None:
    # Set before anything reads the body (the dashboard's guard reads its forms): the app's own
    # MAX_CONTENT_LENGTH stays its routes' limit.
    request.max_content_length = resources().config.max_body_bytes


def _authenticate() -> None:
    # A CORS preflight carries no credentials by design.
    if request.blueprint not in _PROTECTED or request.method == "OPTIONS":
        return
    sign_in(resources().authenticate, request)


def _refuse_shadowed_routes(app: Flask) -> None:
    """Two routes of one path and method: one of them would never be reached."""
    served: dict[str, set[str]] = {}
    ours = []
    for rule in app.url_map.iter_rules():
        if rule.endpoint.startswith(BLUEPRINT + "."):
            ours.append(rule)
        else:
            served.setdefault(rule.rule, set()).update(rule.methods or ())
    implicit = {"HEAD", "OPTIONS"}
    clashes = sorted(
        {rule.rule for rule in ours if ((rule.methods or set()) - implicit) & served.get(rule.rule, set())}
    )
    if clashes:
        raise ValueError(
            f"the app serves {', '.join(clashes)} already: mount the API under a url_prefix of its own"
        )


def _metrics(client: Client, engine: Engine) -> CollectorRegistry:
    # A registry of the app's own, not prometheus_client's global one: two apps in a process
    # (tests, embedding) each report their own broker, database and requests.
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(client.settings))
    registry.register(TaskCollector(autocommit(engine)))
    return registry


def _close_db(_exc: BaseException | None) -> None:
    release_db()
