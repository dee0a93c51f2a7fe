"""The dashboard's session: a signed cookie of its own, ``asynctask_dashboard``, HttpOnly,
SameSite=Strict, sent only to the dashboard's path, and Secure whenever the request came over HTTPS.

It is not Flask's ``session``: an app that mounts the API keeps its own session, secret key and
cookie settings, and the dashboard's never mix with them. The messages a page shows after a
change are kept here too, not with Flask's ``flash``.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

from flask import Response, g, request, url_for
from flask.json.tag import TaggedJSONSerializer
from flask.sessions import SecureCookieSession
from itsdangerous import BadSignature, URLSafeTimedSerializer

from webapi.resources import resources

COOKIE = "asynctask_dashboard"


def open_session() -> None:
    """Before every dashboard request: the session its cookie holds, or an empty one."""
    found = resources()
    data = {}
    sent = request.cookies.get(COOKIE)
    if sent:
        try:
            data = _signer(found.secret_key).loads(sent, max_age=round(found.config.session_hours * 3600))
        except BadSignature:
            pass
    g.asynctask_dashboard_session = SecureCookieSession(data)


def session() -> SecureCookieSession:
    """The request's dashboard session (``open_session``)."""
    opened: SecureCookieSession = g.asynctask_dashboard_session
    return opened


def save_session(response: Response) -> Response:
    """After every dashboard request: the cookie written, renewed or removed."""
    opened: SecureCookieSession | None = g.get("asynctask_dashboard_session")
    if opened is None:
        return response
    if opened.accessed:
        response.vary.add("Cookie")
    # The dashboard's own path, under the prefix and the script root it is mounted at.
    path = url_for(".overview").rstrip("/")
    # Behind a proxy that ends TLS, wrap the app in werkzeug's ProxyFix so this sees https.
    secure = request.is_secure
    if not opened:
        if opened.modified:
            response.delete_cookie(COOKIE, path=path, secure=secure, httponly=True, samesite="Strict")
        return response
    if not (opened.modified or opened.permanent):
        return response
    # A login's end moves with each of its requests, as with Flask's own sessions.
    hours = resources().config.session_hours
    expires = datetime.now(UTC) + timedelta(hours=hours) if opened.permanent else None
    response.set_cookie(
        COOKIE,
        _signer(resources().secret_key).dumps(dict(opened)),
        expires=expires,
        path=path,
        secure=secure,
        httponly=True,
        samesite="Strict",
    )
    return response


def _signer(secret_key: str) -> URLSafeTimedSerializer:
    # Flask's own cookie format: a login made before the dashboard had a cookie of its own holds.
    return URLSafeTimedSerializer(
        secret_key,
        salt="cookie-session",
        serializer=TaggedJSONSerializer(),
        signer_kwargs={"key_derivation": "hmac", "digest_method": hashlib.sha1},
    )


def flash(message: str) -> None:
    """Say ``message`` on the next dashboard page shown."""
    opened = session()
    opened["flashes"] = [*opened.get("flashes", []), message]


def flashed() -> list[str]:
    """The messages ``flash`` kept, once: a page that shows them takes them."""
    messages: list[str] = session().pop("flashes", [])
    return messages
