"""``/``: the example front end (a static page using the API; its files are in ``webapi/static``)."""

from __future__ import annotations

from flask import Blueprint, Response, current_app

page = Blueprint("page", __name__)


@page.get("/")
def index() -> Response:
    response = current_app.send_static_file("index.html")
    response.headers["Cache-Control"] = "no-cache"
    return response
