"""The dashboard's session cookie: signed, HttpOnly, SameSite=Strict, sent only to ``/dashboard``,
and Secure whenever the request came over HTTPS."""

from __future__ import annotations

import logging
import secrets
from datetime import timedelta

from flask import Flask, request
from flask.sessions import SecureCookieSessionInterface

from webapi.config import ApiConfig

logger = logging.getLogger("asynctask.api")


class DashboardSessions(SecureCookieSessionInterface):
    def get_cookie_secure(self, app: Flask) -> bool:
        # Behind a proxy that ends TLS, wrap the app in werkzeug's ProxyFix so this sees https.
        return request.is_secure


def configure_session(app: Flask, config: ApiConfig) -> None:
    if config.secret_key is None and config.auth:
        logger.warning(
            "ASYNCTASK_API_SECRET_KEY is not set: dashboard logins last until this process ends, "
            "and work only if one process serves them"
        )
    app.secret_key = config.secret_key or secrets.token_urlsafe(32)
    app.session_interface = DashboardSessions()
    app.config.update(
        SESSION_COOKIE_NAME="asynctask_dashboard",
        SESSION_COOKIE_PATH="/dashboard",
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Strict",
        PERMANENT_SESSION_LIFETIME=timedelta(hours=config.session_hours),
    )
