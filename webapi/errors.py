"""One error body for every failure: ``{"error": {"code", "message", "details"}}``.

Codes are stable (clients branch on them); messages are for people and may change.
"""

from __future__ import annotations

import logging
from typing import Any

from flask import Response, request
from flask.sansio.scaffold import Scaffold
from redis.exceptions import RedisError
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from werkzeug.exceptions import HTTPException, default_exceptions

from webapi import bodies
from webapi.responses import json_response

logger = logging.getLogger("asynctask.api")

#: Werkzeug's own errors (routing, body size) in our vocabulary.
_HTTP_CODES = {
    400: "invalid_request",
    404: "not_found",
    405: "method_not_allowed",
    413: "body_too_large",
    415: "unsupported_media_type",
}


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, details: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details
        #: Sent with the error response (``Retry-After`` of a refused stream).
        self.headers: dict[str, str] = {}


def limit_exceeded(status: int, code: str, limit: str, maximum: int, message: str) -> ApiError:
    """An error naming the limit that was hit and its value, so a client can split its input."""
    return ApiError(status, code, message, {"limit": limit, "max": maximum})


def error_response(status: int, code: str, message: str, details: Any = None) -> Response:
    body: bodies.Error = {"error": {"code": code, "message": message, "details": details}}
    response = json_response(body, status)
    if status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="asynctask"'
    return response


def register(scope: Scaffold) -> None:
    """Answer every error of ``scope`` (the API's blueprints, or an app of its own) with the body above."""

    @scope.errorhandler(ApiError)
    def api_error(exc: ApiError) -> Response:
        response = error_response(exc.status, exc.code, exc.message, exc.details)
        response.headers.update(exc.headers)
        return response

    @scope.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        status = exc.code or 500
        code = _HTTP_CODES.get(status, "http_error")
        details = None
        if status == 413:
            limit = request.max_content_length
            details = {"limit": "max_body_bytes", "max": limit}
            message = f"the request body is larger than the limit of {limit} bytes"
        else:
            message = exc.description or exc.name
        response = error_response(status, code, message, details)
        allow = exc.get_response().headers.get("Allow") if status == 405 else None
        if allow:
            response.headers["Allow"] = allow
        return response

    # Flask looks for a handler of the status in every scope before one of the class: without
    # these, an app's own ``errorhandler(404)`` would answer the API's 404s and 413s.
    for status in default_exceptions:
        scope.register_error_handler(status, http_error)

    @scope.errorhandler(PoolTimeout)
    def database_busy(exc: Exception) -> Response:
        # Every connection of the pool is held by other requests (one per thread): only a bug,
        # or a server sized below its load, gets here. A client retries; nothing was written.
        logger.warning("no database connection free: %s", exc)
        response = error_response(
            503, "database_busy", "every database connection of this server is in use; try again shortly"
        )
        response.headers["Retry-After"] = "1"
        return response

    @scope.errorhandler(OperationalError)
    @scope.errorhandler(RedisError)
    def backend_down(exc: Exception) -> Response:
        logger.warning("a backing service is unreachable: %s: %s", type(exc).__name__, exc)
        return error_response(503, "unavailable", f"a backing service is unreachable: {type(exc).__name__}")

    @scope.errorhandler(Exception)
    def internal_error(exc: Exception) -> Response:
        logger.exception("unhandled error in a request")
        return error_response(500, "internal_error", "internal server error; the server log has the details")
