"""``asynctask_http_request_duration_seconds``: how long the app took to answer each request,
by route, method and status.

Under ``asynctask api`` (``PROMETHEUS_MULTIPROC_DIR`` set, ``webapi.metricsdir``) each worker
process writes its observations to its own files, and a scrape reads every worker's from the
directory. Elsewhere (tests, an app embedded in another server) the histogram belongs to the
app's registry and counts that process's requests.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from flask import has_request_context, request
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.multiprocess import MultiProcessCollector

from webapi.metricsdir import ENV

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

    from _typeshed import OptExcInfo

NAME = "asynctask_http_request_duration_seconds"
#: The endpoint of a request that matched no route (404, 405): raw paths are the client's to
#: choose, and one series each would let any client grow the scrape without bound.
UNMATCHED = "unmatched"
#: Methods reported as sent; any other is "other", for the same reason.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def request_durations(registry: CollectorRegistry) -> Histogram:
    """The histogram requests are timed into, reported by ``registry``."""
    labels = ("endpoint", "method", "status")
    help_text = "Seconds the API took to answer a request, until its body could be sent."
    directory = os.environ.get(ENV)
    if directory:
        # Read from the files of every worker at each scrape; registering this process's
        # histogram too would count its requests twice.
        MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
        return Histogram(NAME, help_text, labels, registry=None)
    return Histogram(NAME, help_text, labels, registry=registry)


class TimedRequests:
    """WSGI middleware around the Flask app, so that the time spans all it does for a request:
    routing, authentication, the view, error handlers, and the teardown that returns the
    database connection. A progress stream is timed until its headers: what follows is the
    stream's life, not the time a caller waits for an answer.

    Only the API's requests are timed, those of ``blueprint`` and the blueprints inside it: in an
    app that mounts the API, the app's own routes are none of its metrics. A request that matched
    no route is timed only if ``unmatched`` (the app is the API's alone)."""

    def __init__(self, app: WSGIApplication, durations: Histogram, blueprint: str, unmatched: bool) -> None:
        self.app = app
        self.durations = durations
        self.blueprint = blueprint
        self.unmatched = unmatched

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        started = time.perf_counter()
        # What the server answers when the app raises instead of starting a response.
        status, endpoint, timed = "500", UNMATCHED, self.unmatched

        def starting(
            line: str, headers: list[tuple[str, str]], exc_info: OptExcInfo | None = None, /
        ) -> Callable[[bytes], object]:
            nonlocal status, endpoint, timed
            status = line[:3]
            # Flask starts the response inside the request's context, which is gone once it
            # returns: the matched route is read now.
            if has_request_context() and request.url_rule is not None:
                endpoint = request.url_rule.rule
                timed = self._ours(request.blueprint)
            return start_response(line, headers, exc_info)

        try:
            return self.app(environ, starting)
        finally:
            if timed:
                self._observe(environ, endpoint, status, started)

    def _ours(self, blueprint: str | None) -> bool:
        return blueprint is not None and (
            blueprint == self.blueprint or blueprint.startswith(self.blueprint + ".")
        )

    def _observe(self, environ: WSGIEnvironment, endpoint: str, status: str, started: float) -> None:
        method = environ.get("REQUEST_METHOD", "")
        self.durations.labels(endpoint, method if method in METHODS else "other", status).observe(
            time.perf_counter() - started
        )
