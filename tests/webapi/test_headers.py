"""Browser protections on every response (the page keeps its token in localStorage, so no foreign
script may run on the API's origin, nor may another site frame it), and CORS that never allows
the origin ``null``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.webapi.conftest import Api
from webapi.config import ApiConfig


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """Headers do not depend on the database: SQLite only."""
    return f"sqlite:///{tmp_path / 'tracking.db'}"


EXPECTED = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}


def policy(response: Any) -> dict[str, str]:
    directives = (d.strip().split(" ", 1) for d in response.headers["Content-Security-Policy"].split(";"))
    return {d[0]: d[1] if len(d) > 1 else "" for d in directives}


def assert_protected(response: Any) -> None:
    for name, value in EXPECTED.items():
        assert response.headers.get(name) == value, (name, response.status_code)
    csp = policy(response)
    assert csp["default-src"] == "'self'"
    assert csp["script-src"] == "'self'" and csp["style-src"] == "'self'"
    assert csp["frame-ancestors"] == "'none'"
    assert csp["object-src"] == "'none'" and csp["base-uri"] == "'none'"
    assert "unsafe" not in response.headers["Content-Security-Policy"]


def test_every_kind_of_response_is_protected(api: Api) -> None:
    task_id = api.post_json({"job": "echo", "items": [1]}).get_json()["task_id"]
    api.post(f"/api/tasks/{task_id}/cancel")
    for response in (
        api.http.get("/"),
        api.http.get("/static/app.js"),
        api.http.get("/static/style.css"),
        api.http.get("/openapi.json"),
        api.http.get("/healthz"),
        api.get("/api/jobs"),
        api.get(f"/api/tasks/{task_id}"),
        api.get(f"/api/tasks/{task_id}/stream"),
        api.post_json({"job": "echo", "items": [1]}),
        api.http.get("/api/tasks"),  # 401
        api.get("/api/tasks/nope"),  # 404
        api.http.delete("/healthz"),  # 405
        api.post("/api/tasks", data=b"x" * 20_000, content_type="application/json"),  # 413
        api.post_json({"job": "echo", "items": [float("nan")]}),  # 422
    ):
        with response:
            assert_protected(response)


def test_the_page_needs_nothing_the_policy_forbids(api: Api) -> None:
    """No inline script, style or handler: the policy would block it and the page would break."""
    with api.http.get("/") as page:
        html = page.get_data(as_text=True)
    assert "<style" not in html and not re.search(r"\sstyle\s*=", html)
    assert not re.search(r"\son[a-z]+\s*=", html, re.IGNORECASE) and "javascript:" not in html
    scripts = html.split("<script")[1:]
    assert scripts and all(re.match(r'\s+src="static/[^"]+"[^>]*></script>', tag) for tag in scripts)


@pytest.mark.parametrize("origins", [("*",), ("https://app.example",)])
def test_cors_never_allows_the_null_origin(make_api: Any, origins: tuple[str, ...]) -> None:
    api: Api = make_api(cors_origins=origins)
    for response in (
        api.http.get("/api/jobs", headers={**api.headers(), "Origin": "null"}),
        api.http.options("/api/tasks", headers={"Origin": "null", "Access-Control-Request-Method": "POST"}),
    ):
        assert "Access-Control-Allow-Origin" not in response.headers
    allowed = api.http.get("/api/jobs", headers={**api.headers(), "Origin": "https://app.example"})
    assert allowed.headers["Access-Control-Allow-Origin"] == "https://app.example"
    assert_protected(allowed)


def test_null_cannot_be_configured_as_an_origin() -> None:
    with pytest.raises(ValueError, match="null"):
        ApiConfig.from_env({"ASYNCTASK_API_CORS_ORIGINS": "https://a.example, null"})
