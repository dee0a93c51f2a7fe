"""Who is calling: an ``Authenticate`` callable names each request's caller (a tenant, and
whether it is an operator) or refuses it. The built-in one reads bearer tokens
(``TokenVerifier``); an app that mounts the API (``webapi.init_app``) may pass its own, reading
its session, JWT or API keys.

A verified token is remembered for ``token_cache_seconds`` so that a status poll costs no
extra query; unknown tokens are never remembered, so guessing cannot fill the memory.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from flask import Request, g
from sqlalchemy import Engine

from asynctask import tokens
from asynctask.tokens import Caller
from webapi.errors import ApiError

#: Names the caller of a request, or None to refuse it with ``401 unauthorized``. It may raise
#: an ``ApiError`` (or a werkzeug ``HTTPException``) to refuse it otherwise.
Authenticate = Callable[[Request], Caller | None]

#: Entries kept before the cache starts over (tokens are few; this only bounds the worst case).
CACHE_LIMIT = 10_000


class TokenVerifier:
    """The built-in ``Authenticate``: ``Authorization: Bearer <token>`` of ``asynctask tokens``.
    A token not in the cache is looked up on a connection given back at once: the request's own
    work takes its connections after, never beside this one."""

    def __init__(self, reader: Engine, ttl: float) -> None:
        self.reader = reader
        self.ttl = ttl
        self._lock = threading.Lock()
        self._known: dict[str, tuple[Caller, float]] = {}

    def __call__(self, request: Request) -> Caller:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise ApiError(401, "unauthorized", "send the header Authorization: Bearer <token>")
        caller = self.caller(token)
        if caller is None:
            raise ApiError(401, "unauthorized", "the token is unknown or revoked")
        return caller

    def caller(self, token: str) -> Caller | None:
        now = time.monotonic()
        with self._lock:
            cached = self._known.get(token)
        if cached is not None and cached[1] > now:
            return cached[0]
        with self.reader.connect() as connection:
            caller = tokens.caller_for(connection, token)
        if caller is not None and self.ttl > 0:
            with self._lock:
                if len(self._known) >= CACHE_LIMIT:
                    self._known.clear()
                self._known[token] = (caller, now + self.ttl)
        return caller


def identify(authenticate: Authenticate, request: Request) -> Caller:
    """The caller ``authenticate`` names, or 401. What it returns is checked: a tenant every
    store can hold, as a token's would be."""
    caller = authenticate(request)
    if caller is None:
        raise ApiError(401, "unauthorized", "this request is not signed in")
    if not isinstance(caller, Caller):
        raise TypeError(
            f"an Authenticate callable returns a webapi.Caller or None, not {type(caller).__name__}"
        )
    if caller.tenant is not None:
        tokens.check_name("tenant", caller.tenant)
    return caller


def sign_in(authenticate: Authenticate | None, request: Request) -> None:
    """Remember the request's caller for ``caller_tenant`` and ``require_operator``, or raise a
    refusal. ``authenticate`` None is auth off: the tenant-less caller, an operator."""
    if authenticate is None:
        g.asynctask_tenant = None
        g.asynctask_operator = True
        return
    caller = identify(authenticate, request)
    g.asynctask_tenant = caller.tenant
    g.asynctask_operator = caller.operator


def caller_tenant() -> str | None:
    """The tenant of the request's caller (None with auth off: every tenant's tasks)."""
    tenant: str | None = g.asynctask_tenant
    return tenant


def require_operator(operators: tuple[str, ...]) -> None:
    """Raise 403 unless the caller is an operator: an operator's token, or a token of an operator
    tenant (with auth off, every caller is)."""
    if not (g.asynctask_operator or g.asynctask_tenant in operators):
        raise ApiError(
            403,
            "operator_only",
            "only an operator's token (asynctask tokens create --operator) or a token of an operator "
            "tenant (ASYNCTASK_API_OPERATOR_TENANTS) may call this",
        )
