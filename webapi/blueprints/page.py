"""``/``: the example front end (a static page using the API; its files are in ``webapi/static``).

The page names the API and its own files by relative URLs, so it works wherever the API is
mounted (``webapi.init_app(url_prefix=...)``): served at ``/jobs/``, it calls ``/jobs/api/...``.
"""

from __future__ import annotations

from pathlib import Path

from flask import Blueprint, Response

page = Blueprint(
    "page", __name__, static_folder=Path(__file__).parent.parent / "static", static_url_path="/static"
)


@page.get("/")
def index() -> Response:
    response = page.send_static_file("index.html")
    response.headers["Cache-Control"] = "no-cache"
    return response
