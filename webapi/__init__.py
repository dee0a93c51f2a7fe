"""The HTTP API: submit bulk work as tasks, follow their progress, cancel and retry them.

``create_app()`` is the Flask app factory; ``asynctask api`` serves it with gunicorn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from webapi.app import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    # Loaded on first use, not with the package: ``asynctask api`` (webapi.cli) names the
    # metrics directory before the app's modules import prometheus_client (webapi.metricsdir).
    if name == "create_app":
        from webapi.app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
