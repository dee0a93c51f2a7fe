"""A Flask app of a team's own, with its own login, secret key, session cookie, error pages,
hooks, body limit and filters, that mounts the API under ``/jobs`` with an ``authenticate``
callable reading its session (tests/webapi/test_embedding.py and its browser test)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from flask import Flask, Request, Response, g, request, session
from sqlalchemy import Engine

from asynctask import Client, Settings
from webapi import Caller, init_app

PREFIX = "/jobs"
HOST_SECRET = "the host app's own secret key, not the API's"
#: The host's own body limit: far below a task's body, to show it does not reach the API's routes.
HOST_MAX_BODY = 100
#: Users of the host app, and the caller each one is to the API.
USERS = {
    "ann": Caller("acme", operator=False),
    "bob": Caller("globex", operator=False),
    "olga": Caller("ops", operator=True),
}


@dataclass
class Seen:
    """What the host's own hooks saw."""

    before: list[str] = field(default_factory=list)
    #: ``g.db`` at the end of each request: the host's own object, whatever ran in between.
    db_after: list[Any] = field(default_factory=list)


def authenticate(req: Request) -> Caller | None:
    """The host's session names the user; the user names the tenant."""
    user = session.get("user")
    return USERS.get(user) if isinstance(user, str) else None


def host_app(settings: Settings, client: Client, engine: Engine, **config: Any) -> tuple[Flask, Seen]:
    app = Flask("hostapp")
    app.secret_key = HOST_SECRET
    app.config.update(SESSION_COOKIE_NAME="host_session", MAX_CONTENT_LENGTH=HOST_MAX_BODY)
    seen = Seen()
    host_db = object()

    @app.before_request
    def remember() -> None:
        seen.before.append(request.path)
        g.db = host_db

    @app.after_request
    def mark(response: Response) -> Response:
        seen.db_after.append(g.get("db"))
        response.headers["X-Host"] = "yes"
        return response

    @app.errorhandler(404)
    def not_found(_exc: Exception) -> tuple[str, int]:
        return "<h1>Not on this site</h1>", 404

    @app.errorhandler(413)
    def too_large(_exc: Exception) -> tuple[str, int]:
        return "<h1>Too large for this site</h1>", 413

    @app.template_filter("when")
    def when(value: object) -> str:
        return f"host's {value}"

    @app.get("/")
    def home() -> str:
        return "host home"

    @app.get("/login")
    def login() -> str:
        session["user"] = request.args["user"]
        return f"signed in as {session['user']}"

    @app.get("/logout")
    def logout() -> str:
        session.clear()
        return "signed out"

    @app.post("/echo")
    def echo() -> str:
        return str(len(request.get_data()))

    base = {"settings": settings, "stream_interval": 0.05, "max_body_bytes": 16 * 1024}
    init_app(
        app,
        {**base, **config},
        url_prefix=PREFIX,
        authenticate=authenticate,
        client=client,
        engine=engine,
        dashboard=True,
    )
    return app, seen
