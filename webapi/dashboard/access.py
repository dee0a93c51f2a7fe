"""Who may see the dashboard, and the protection of its forms.

With the built-in tokens, an operator logs in once with a token (an operator's token, or one of
an operator tenant's); the dashboard's cookie (``cookie``) then holds the token's hash, signed
with the API's ``secret_key``, HttpOnly and SameSite=Strict, so scripts cannot read it and other
sites cannot send it. Every request checks the hash again, so a revoked token ends its sessions
at once. A request may instead carry ``Authorization: Bearer`` (scripts, tests): the same checks
apply, and as a browser never adds that header by itself, such requests need no CSRF token.

In an app that mounts the API with an ``authenticate`` callable of its own, that callable names
the caller of every dashboard request (from the app's own login, say) and the dashboard has no
login of its own: an operator it names gets in.

Every form that changes something carries the session's CSRF token, and a request whose
``Origin`` is another site's is refused before that.
"""

from __future__ import annotations

import hmac
import secrets
from typing import NoReturn
from urllib.parse import urlsplit

from flask import abort, redirect, render_template, request, url_for
from werkzeug.wrappers.response import Response

from asynctask import tokens
from webapi.auth import TokenVerifier, identify
from webapi.dashboard.cookie import session
from webapi.resources import db, resources

#: Endpoints (the blueprint's own names) reachable without a login: the login form needs no login
#: to be shown, and the pages' script and style none to be read.
_OPEN = {"login_form", "login_submit", "static"}
_SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}


def guard() -> Response | None:
    """Before every dashboard request: a login page for a browser without a session, 401 for
    anything else, 403 for a caller who is not an operator or a form without its CSRF token."""
    if request.method not in _SAFE_METHODS:
        _same_origin()
    if (request.endpoint or "").rpartition(".")[2] in _OPEN:
        return None
    authenticate = resources().authenticate
    if authenticate is None:
        _checked_form()
        return None
    if not isinstance(authenticate, TokenVerifier):
        # The app's own login: its callable may read a cookie, so every form needs its CSRF token.
        _require_operator(identify(authenticate, request))
        _checked_form()
        return None
    header = request.headers.get("Authorization")
    if header is not None:
        scheme, _, token = header.partition(" ")
        caller = tokens.caller_for(db(), token.strip()) if scheme.lower() == "bearer" else None
        if caller is None:
            abort(401)
        _require_operator(caller)
        return None
    digest = session().get("token")
    caller = tokens.caller_for_hash(db(), digest) if isinstance(digest, str) else None
    if caller is None:
        session().pop("token", None)
        if request.method in _SAFE_METHODS:
            wanted = request.script_root + request.full_path.rstrip("?")
            return redirect(url_for(".login_form", next=wanted))
        abort(401)
    _require_operator(caller)
    _checked_form()
    return None


def _require_operator(caller: tokens.Caller) -> None:
    if not (caller.operator or caller.tenant in resources().config.operator_tenants):
        abort(403)


def _checked_form() -> None:
    if request.method not in _SAFE_METHODS:
        _require_csrf()


def _require_csrf() -> None:
    sent = request.form.get("csrf_token", "")
    expected = session().get("csrf")
    if not isinstance(expected, str) or not hmac.compare_digest(sent.encode(), expected.encode()):
        _refuse(403, "the form has expired or did not come from this dashboard: load the page again")


def _same_origin() -> None:
    origin = request.headers.get("Origin")
    if origin == "null":
        # Under the app's ``Referrer-Policy: no-referrer`` a browser posts every form with
        # ``Origin: null``, its own pages' too; Sec-Fetch-Site still tells where it came from.
        if request.headers.get("Sec-Fetch-Site", "same-origin") != "same-origin":
            _refuse(403, "a request from another site may not change anything here")
        return
    if origin is not None and urlsplit(origin).netloc != request.host:
        _refuse(403, "a request from another site may not change anything here")


def _refuse(status: int, message: str) -> NoReturn:
    page = render_template("asynctask_dashboard/refused.html", message=message)
    abort(Response(page, status, mimetype="text/html"))


def csrf_token() -> str:
    """The session's CSRF token, made on first use; every form of the dashboard carries it."""
    token = session().get("csrf")
    if not isinstance(token, str):
        token = secrets.token_urlsafe(32)
        session()["csrf"] = token
    return token


def token_login() -> bool:
    """Whether the dashboard has a login of its own: with the built-in tokens only."""
    return isinstance(resources().authenticate, TokenVerifier)


def login_form() -> str:
    _require_token_login()
    return render_template("asynctask_dashboard/login.html", next=_next_page(), error=None)


def login_submit() -> Response | tuple[str, int]:
    _require_token_login()
    _require_csrf()
    token = request.form.get("token", "").strip()
    caller = tokens.caller_for(db(), token) if token else None
    if caller is None:
        return _login_refused(401, "unknown or revoked token")
    if not (caller.operator or caller.tenant in resources().config.operator_tenants):
        return _login_refused(403, "this token is a tenant's, not an operator's")
    # A fresh session at login: a session fixed by someone else before it is dropped.
    session().clear()
    session().permanent = True
    session()["token"] = tokens.hash_token(token)
    return redirect(_next_page(), 303)


def _login_refused(status: int, error: str) -> tuple[str, int]:
    return render_template("asynctask_dashboard/login.html", next=_next_page(), error=error), status


def logout() -> Response:
    _require_token_login()
    session().clear()
    return redirect(url_for(".login_form"), 303)


def _require_token_login() -> None:
    if not token_login():
        abort(404)


def _next_page() -> str:
    """Where to go after login: a dashboard page only, so the login is no open redirect."""
    wanted = request.values.get("next", "")
    home = url_for(".overview")
    parts = urlsplit(wanted)
    if parts.scheme or parts.netloc or not wanted.startswith(home) or "\\" in wanted:
        return home
    return wanted
