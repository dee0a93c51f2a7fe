"""The app factory: ``create_app()`` reads ``ASYNCTASK_*`` from the environment.

Serve it with ``asynctask api`` or any WSGI server: ``gunicorn 'webapi:create_app()'``. It is the
API mounted (``webapi.embed``) at the root of an app of its own, with the example page, the
dashboard and the built-in tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask import Flask
from sqlalchemy import Engine

from asynctask.client import Client
from webapi.config import ApiConfig
from webapi.embed import mount


def create_app(
    config: ApiConfig | Mapping[str, Any] | None = None,
    *,
    client: Client | None = None,
    engine: Engine | None = None,
) -> Flask:
    """``config``: an ``ApiConfig``, or a mapping of its fields over the environment's values.
    ``client`` and ``engine`` replace the ones built from the settings (tests)."""
    # No static folder of the app's: the page's files are its blueprint's, as in any app it is mounted in.
    app = Flask(__name__, static_folder=None)
    mount(app, config, client=client, engine=engine, dashboard=True, own_app=True)
    return app
