"""``asynctask api``: the app under gunicorn, threaded workers (a progress stream holds a thread,
so each worker takes at most ``stream_cap`` streams and keeps its other threads for requests)."""

from __future__ import annotations

import gc
import logging
import secrets
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from gunicorn.app.base import BaseApplication

from webapi.config import ApiConfig
from webapi.streamslots import stream_cap

logger = logging.getLogger("asynctask.api")


class ApiServer(BaseApplication):  # type: ignore[misc]
    def __init__(self, make_app: Callable[[], Any], options: dict[str, Any]) -> None:
        self.make_app = make_app
        self.options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        # Called in each worker after the fork: every worker has its own Redis and SQL pools.
        app = self.make_app()
        # The app's long-lived objects (modules, compiled statements) leave the collector's
        # view: full collections, which would otherwise walk them all, stop stalling requests.
        gc.collect()
        gc.freeze()
        return app


def serve(
    config: ApiConfig,
    *,
    host: str,
    port: int,
    workers: int,
    threads: int,
    access_log: bool = False,
    on_ready: Callable[[], None] | None = None,
) -> None:
    """Run gunicorn until it stops; ``on_ready`` is called once it listens."""
    from webapi.app import create_app
    from webapi.warmup import warm_up

    config = replace(config, threads=threads)
    streams = stream_cap(config.max_streams, threads)
    if streams < config.max_streams:
        logger.info("%d threads per worker: each worker holds at most %d progress streams", threads, streams)
        config = replace(config, max_streams=streams)
    if config.secret_key is None:
        # Made before the fork, so every worker process signs and checks with the same key.
        config = replace(config, secret_key=secrets.token_urlsafe(32))
    options: dict[str, Any] = {
        "bind": f"{host}:{port}",
        "workers": workers,
        "worker_class": "gthread",
        "threads": threads,
        # Streams stay open for minutes; the keepalive comments keep the worker's heartbeat.
        "timeout": 60,
        "graceful_timeout": 10,
        "accesslog": "-" if access_log else None,
        "errorlog": "-",
        "loglevel": "warning",
    }
    if on_ready is not None:
        options["when_ready"] = lambda _arbiter: on_ready()
    ApiServer(lambda: warm_up(create_app(config)), options).run()
