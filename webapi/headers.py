"""Headers added to every response of the API's routes: the browser protections, and CORS for the
allowed origins.

The example page keeps its token in localStorage, so no script but the page's own file may run
on this origin: the policy allows scripts, styles and requests from the origin only (no inline
script or style, no ``eval``), and no other site may frame any page.
"""

from __future__ import annotations

from flask import Response, request
from flask.sansio.scaffold import Scaffold

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        # The page's empty favicon is a data: URL (so the browser asks for no /favicon.ico).
        "img-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    # For browsers older than frame-ancestors.
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}


def add_security_headers(scope: Scaffold) -> None:
    @scope.after_request
    def secure(response: Response) -> Response:
        response.headers.update(SECURITY_HEADERS)
        return response


def allow_cors(scope: Scaffold, origins: tuple[str, ...]) -> None:
    any_origin = "*" in origins

    @scope.after_request
    def add_headers(response: Response) -> Response:
        origin = request.headers.get("Origin")
        # "null" is the origin of sandboxed frames, file: pages and some redirects: any page
        # can send it, so it is never allowed, even with "*".
        if origin and origin != "null" and (any_origin or origin in origins):
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Access-Control-Allow-Headers"] = "Authorization, Content-Type"
            response.headers["Access-Control-Allow-Methods"] = "GET, POST, OPTIONS"
            response.headers["Access-Control-Expose-Headers"] = "Location, Retry-After"
            response.headers["Access-Control-Max-Age"] = "600"
            response.vary.add("Origin")
        return response
