"""The API mounted in an app of a team's own (``webapi.init_app``, tests/webapi/hostapp.py): the
app's login decides who calls, the API's routes live under the prefix, and nothing of the app
(its routes, error pages, hooks, session, body limit, filters, ``g``) is changed by mounting."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import pytest
from flask import Flask, Request, abort, redirect
from flask.testing import FlaskClient
from sqlalchemy import Engine

from asynctask import Client, Registry, Settings
from tests.webapi.conftest import Api, MakeApi, close_watchers, define_jobs
from tests.webapi.hostapp import HOST_SECRET, PREFIX, Seen, host_app
from webapi import ApiError, Caller, init_app

ITEMS = {"job": "echo", "items": [1, 2, 3]}


@dataclass
class Host:
    app: Flask
    seen: Seen

    def client(self, user: str | None = None) -> FlaskClient:
        """A browser of the host app, signed in as ``user`` through the host's own login."""
        http = self.app.test_client()
        if user is not None:
            assert http.get(f"/login?user={user}").status_code == 200
        return http


@pytest.fixture
def make_host(
    registry: Registry, tracked_settings: Settings, tracked_client: Client, database_engine: Engine
) -> Iterator[Any]:
    define_jobs(registry)
    apps: list[Flask] = []

    def make(**config: Any) -> Host:
        app, seen = host_app(tracked_settings, tracked_client, database_engine, **config)
        app.testing = True
        apps.append(app)
        return Host(app, seen)

    yield make
    close_watchers(apps)


@pytest.fixture
def host(make_host: Any) -> Host:
    made: Host = make_host()
    return made


def error(response: Any) -> tuple[int, str]:
    return response.status_code, response.get_json()["error"]["code"]


def test_a_signed_in_user_creates_a_task_and_sees_its_tenants_tasks_only(host: Host) -> None:
    ann = host.client("ann")
    created = ann.post(f"{PREFIX}/api/tasks", json=ITEMS)
    assert created.status_code == 202, created.get_data(as_text=True)
    task_id = created.get_json()["task_id"]
    assert ann.get(f"{PREFIX}/api/tasks/{task_id}").get_json()["job"] == "echo"
    assert [task["id"] for task in ann.get(f"{PREFIX}/api/tasks").get_json()["items"]] == [task_id]

    bob = host.client("bob")
    assert error(bob.get(f"{PREFIX}/api/tasks/{task_id}")) == (404, "task_not_found")
    assert error(bob.post(f"{PREFIX}/api/tasks/{task_id}/cancel")) == (404, "task_not_found")
    assert bob.get(f"{PREFIX}/api/tasks").get_json()["items"] == []


def test_without_the_apps_session_the_api_answers_401_unauthorized(host: Host) -> None:
    anonymous = host.client()
    for response in (
        anonymous.get(f"{PREFIX}/api/tasks"),
        anonymous.post(f"{PREFIX}/api/tasks", json=ITEMS),
        anonymous.get(f"{PREFIX}/api/jobs"),
    ):
        assert error(response) == (401, "unauthorized")
    # Signed out again: refused again.
    ann = host.client("ann")
    assert ann.get(f"{PREFIX}/api/tasks").status_code == 200
    ann.get("/logout")
    assert error(ann.get(f"{PREFIX}/api/tasks")) == (401, "unauthorized")
    # A bearer token is nothing to this app's callable.
    assert error(anonymous.get(f"{PREFIX}/api/tasks", headers={"Authorization": "Bearer atk_x"})) == (
        401,
        "unauthorized",
    )


def test_operators_are_who_the_callable_says(host: Host) -> None:
    assert host.client("olga").get(f"{PREFIX}/api/queues").status_code == 200
    assert error(host.client("ann").get(f"{PREFIX}/api/queues")) == (403, "operator_only")
    assert host.client("olga").get(f"{PREFIX}/metrics").status_code == 200


def test_the_callable_may_refuse_with_an_error_of_its_own(
    registry: Registry, tracked_settings: Settings, tracked_client: Client, database_engine: Engine
) -> None:
    def suspended(req: Request) -> Caller | None:
        raise ApiError(403, "account_suspended", "this account is suspended")

    def broken(req: Request) -> Caller | None:
        return cast(Caller, "acme")

    def to_login(req: Request) -> Caller | None:
        abort(redirect("/login"))

    apps = []
    for authenticate in (suspended, broken, to_login):
        app = Flask("refusing", static_folder=None)
        init_app(
            app,
            {"settings": tracked_settings},
            authenticate=authenticate,
            client=tracked_client,
            engine=database_engine,
        )
        apps.append(app)
    try:
        assert error(apps[0].test_client().get("/api/tasks")) == (403, "account_suspended")
        # A callable that answers something else than a Caller is the app's bug: a 500, logged.
        assert error(apps[1].test_client().get("/api/tasks")) == (500, "internal_error")
        # A response of the app's own, a redirect to its login page, goes out as it is.
        sent = apps[2].test_client().get("/api/tasks")
        assert (sent.status_code, sent.headers["Location"]) == (302, "/login")
    finally:
        close_watchers(apps)


def test_the_api_lives_under_the_prefix(host: Host) -> None:
    ann = host.client("ann")
    assert ann.get(f"{PREFIX}/api/jobs").status_code == 200
    assert ann.get(f"{PREFIX}/healthz").get_json() == {"status": "ok"}
    # Outside the prefix the paths are the host's, and it serves none of them.
    for path in ("/api/jobs", "/healthz", "/openapi.json", "/dashboard/"):
        response = ann.get(path)
        assert (response.status_code, response.get_data(as_text=True)) == (404, "<h1>Not on this site</h1>")
    # The document names the prefix as its server: its paths are written from the API's root.
    document = ann.get(f"{PREFIX}/openapi.json").get_json()
    assert document["servers"] == [{"url": PREFIX}] and "/api/tasks" in document["paths"]
    # The page and its files, which it names relative to itself.
    with ann.get(f"{PREFIX}/") as page:
        html = page.get_data(as_text=True)
        assert page.status_code == 200 and 'src="static/app.js"' in html
    assert not re.search(r'(src|href)="/', html)
    with ann.get(f"{PREFIX}/static/app.js") as answer:
        script = answer.get_data(as_text=True)
    assert not re.search(r"""(fetch|api)\((["'`])/""", script)
    assert 'api("api/jobs")' in script


def test_the_apps_routes_error_pages_and_hooks_are_its_own(host: Host) -> None:
    ann = host.client("ann")
    assert ann.get("/").get_data(as_text=True) == "host home"
    # The host's 404 page for its paths, the API's error body for the API's.
    assert ann.get("/nowhere").get_data(as_text=True) == "<h1>Not on this site</h1>"
    assert error(ann.get(f"{PREFIX}/api/tasks/nope")) == (404, "task_not_found")
    # The host's hooks run for every request, the API's too, and its g.db is left alone.
    host.seen.before.clear()
    host.seen.db_after.clear()
    api_answer = ann.post(f"{PREFIX}/api/tasks", json=ITEMS)
    own_answer = ann.get("/")
    assert api_answer.status_code == 202
    assert host.seen.before == [f"{PREFIX}/api/tasks", "/"]
    assert len({id(db) for db in host.seen.db_after}) == 1 and host.seen.db_after[0] is not None
    assert api_answer.headers["X-Host"] == own_answer.headers["X-Host"] == "yes"
    # The API's headers are on the API's answers only.
    assert "Content-Security-Policy" in api_answer.headers
    assert "Content-Security-Policy" not in own_answer.headers
    # The host's secret key, session cookie and filters are its own.
    assert host.app.secret_key == HOST_SECRET
    assert host.app.config["SESSION_COOKIE_NAME"] == "host_session"
    assert ann.get_cookie("host_session") is not None
    assert host.app.jinja_env.filters["when"]("x") == "host's x"


def test_each_body_limit_applies_to_its_own_routes(host: Host) -> None:
    ann = host.client("ann")
    # The host's 100 bytes do not limit the API, whose own limit is 16 KiB.
    items = {"job": "echo", "items": ["x" * 50] * 20}
    assert ann.post(f"{PREFIX}/api/tasks", json=items).status_code == 202
    too_large = ann.post(f"{PREFIX}/api/tasks", data=b"[" * 20_000, content_type="application/json")
    assert error(too_large) == (413, "body_too_large")
    assert too_large.get_json()["error"]["details"] == {"limit": "max_body_bytes", "max": 16 * 1024}
    # The host's limit, and its own 413 page, for its routes.
    assert ann.post("/echo", data=b"x" * 50).get_data(as_text=True) == "50"
    refused = ann.post("/echo", data=b"x" * 500)
    assert (refused.status_code, refused.get_data(as_text=True)) == (413, "<h1>Too large for this site</h1>")


def test_cors_headers_are_on_the_apis_answers_only(make_host: Any) -> None:
    host: Host = make_host(cors_origins=("https://front.example",))
    ann = host.client("ann")
    origin = {"Origin": "https://front.example"}
    assert ann.get(f"{PREFIX}/api/jobs", headers=origin).headers["Access-Control-Allow-Origin"] == (
        "https://front.example"
    )
    assert "Access-Control-Allow-Origin" not in ann.get("/", headers=origin).headers


def test_only_the_apis_requests_are_timed(host: Host) -> None:
    olga = host.client("olga")
    olga.get("/")
    olga.get("/nowhere")
    olga.get(f"{PREFIX}/api/jobs")
    scrape = olga.get(f"{PREFIX}/metrics").get_data(as_text=True)
    endpoints = set(re.findall(r'asynctask_http_request_duration_seconds_count\{endpoint="([^"]+)"', scrape))
    assert endpoints == {f"{PREFIX}/api/jobs"}


def test_the_dashboard_lets_in_the_operators_the_callable_names(host: Host) -> None:
    olga = host.client("olga")
    overview = olga.get(f"{PREFIX}/dashboard/")
    assert overview.status_code == 200
    html = overview.get_data(as_text=True)
    # Its links and files are under the prefix; it has no login of its own to offer.
    assert f'href="{PREFIX}/dashboard/queues"' in html and f"{PREFIX}/dashboard/static/dashboard.css" in html
    assert "Log out" not in html
    assert olga.get(f"{PREFIX}/dashboard/login").status_code == 404
    assert error(host.client("ann").get(f"{PREFIX}/dashboard/")) == (403, "http_error")
    assert error(host.client().get(f"{PREFIX}/dashboard/")) == (401, "unauthorized")

    # A form: its CSRF token is kept in the dashboard's own cookie, on the dashboard's path.
    assert host.client("ann").post(f"{PREFIX}/api/tasks", json=ITEMS).status_code == 202
    token = re.search(r'name="csrf_token" value="([^"]+)"', olga.get(f"{PREFIX}/dashboard/queues").text)
    assert token is not None
    cookie = olga.get_cookie("asynctask_dashboard", path=f"{PREFIX}/dashboard")
    assert cookie is not None
    done = olga.post(f"{PREFIX}/dashboard/queues/default/pause", data={"csrf_token": token.group(1)})
    assert done.status_code == 303 and done.headers["Location"] == f"{PREFIX}/dashboard/queues"
    assert "queue default paused" in olga.get(done.headers["Location"]).get_data(as_text=True)
    assert olga.post(f"{PREFIX}/dashboard/queues/default/resume").status_code == 403


def test_an_app_route_the_api_would_shadow_is_refused(
    tracked_settings: Settings, tracked_client: Client, database_engine: Engine
) -> None:
    app = Flask("with_metrics")

    @app.get("/metrics")
    def own_metrics() -> str:
        return "mine"

    with pytest.raises(ValueError, match="/metrics"):
        init_app(app, {"settings": tracked_settings}, client=tracked_client, engine=database_engine)
    # Flask's own static route, at /static like the page's files.
    with pytest.raises(ValueError, match="/static"):
        init_app(
            Flask("with_static"),
            {"settings": tracked_settings},
            client=tracked_client,
            engine=database_engine,
        )


def test_mounting_twice_or_a_callable_with_auth_off_is_refused(
    tracked_settings: Settings, tracked_client: Client, database_engine: Engine
) -> None:
    app = Flask("twice", static_folder=None)
    init_app(
        app, {"settings": tracked_settings}, url_prefix="/a", client=tracked_client, engine=database_engine
    )
    try:
        with pytest.raises(RuntimeError, match="already"):
            init_app(
                app,
                {"settings": tracked_settings},
                url_prefix="/b",
                client=tracked_client,
                engine=database_engine,
            )
    finally:
        close_watchers([app])
    with pytest.raises(ValueError, match="auth"):
        init_app(
            Flask("off", static_folder=None),
            {"settings": tracked_settings, "auth": False},
            authenticate=lambda req: Caller("acme", operator=False),
            client=tracked_client,
            engine=database_engine,
        )
    with pytest.raises(ValueError, match="slash"):
        init_app(Flask("bad", static_folder=None), {"settings": tracked_settings}, url_prefix="jobs")


def test_the_built_in_tokens_stay_the_default(make_api: MakeApi, database_engine: Engine) -> None:
    api: Api = make_api()
    assert api.get("/api/tasks").status_code == 200
    assert error(api.http.get("/api/tasks")) == (401, "unauthorized")
    # Mounted without a callable, under a prefix: the same tokens.
    app = Flask("tokens", static_folder=None)
    init_app(
        app,
        {"settings": api.client.settings, "token_cache_seconds": 0.0},
        url_prefix=PREFIX,
        client=api.client,
        engine=database_engine,
    )
    try:
        http = app.test_client()
        assert http.get(f"{PREFIX}/api/tasks", headers=api.headers()).status_code == 200
        assert error(http.get(f"{PREFIX}/api/tasks")) == (401, "unauthorized")
    finally:
        close_watchers([app])
