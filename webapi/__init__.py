"""The HTTP API: submit bulk work as tasks, follow their progress, cancel and retry them.

``create_app()`` is the Flask app factory; ``asynctask api`` serves it with gunicorn.
"""

from webapi.app import create_app

__all__ = ["create_app"]
