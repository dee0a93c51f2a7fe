"""The HTTP API: submit bulk work as tasks, follow their progress, cancel and retry them.

``create_app()`` is the Flask app factory; ``asynctask api`` serves it with gunicorn.
``init_app(app, ...)`` mounts the API in an app of your own, with your own authentication: an
``Authenticate`` callable from a request to a ``Caller`` (or None, or an ``ApiError`` raised).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from asynctask.tokens import Caller

if TYPE_CHECKING:
    from webapi.app import create_app
    from webapi.auth import Authenticate
    from webapi.embed import init_app
    from webapi.errors import ApiError

__all__ = ["ApiError", "Authenticate", "Caller", "create_app", "init_app"]

#: Where each lazily loaded name is defined.
_LAZY = {
    "create_app": "webapi.app",
    "init_app": "webapi.embed",
    "Authenticate": "webapi.auth",
    "ApiError": "webapi.errors",
}


def __getattr__(name: str) -> Any:
    # Loaded on first use, not with the package: ``asynctask api`` (webapi.cli) names the
    # metrics directory before the app's modules import prometheus_client (webapi.metricsdir).
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
