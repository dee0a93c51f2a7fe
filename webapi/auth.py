"""Bearer tokens: each request's token names its tenant (``g.tenant``) and whether it is an
operator's (``g.operator``).

A verified token is remembered for ``token_cache_seconds`` so that a status poll costs no
extra query; unknown tokens are never remembered, so guessing cannot fill the memory.
"""

from __future__ import annotations

import threading
import time

from flask import g, request
from sqlalchemy import Engine

from asynctask import tokens
from webapi.errors import ApiError

#: Entries kept before the cache starts over (tokens are few; this only bounds the worst case).
CACHE_LIMIT = 10_000


class TokenVerifier:
    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._lock = threading.Lock()
        self._known: dict[str, tuple[tokens.Caller, float]] = {}

    def caller(self, reader: Engine, token: str) -> tokens.Caller | None:
        now = time.monotonic()
        with self._lock:
            cached = self._known.get(token)
        if cached is not None and cached[1] > now:
            return cached[0]
        with reader.connect() as connection:
            caller = tokens.caller_for(connection, token)
        if caller is not None and self.ttl > 0:
            with self._lock:
                if len(self._known) >= CACHE_LIMIT:
                    self._known.clear()
                self._known[token] = (caller, now + self.ttl)
        return caller


def authenticate(enabled: bool, verifier: TokenVerifier, reader: Engine) -> None:
    """Set ``g.tenant`` and ``g.operator`` from the Authorization header, or raise 401 (a None
    tenant when auth is off). A token not in the cache is looked up on a connection given back
    at once: the request's own work takes its connections after, never beside this one."""
    if not enabled:
        g.tenant = None
        g.operator = True
        return
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise ApiError(401, "unauthorized", "send the header Authorization: Bearer <token>")
    caller = verifier.caller(reader, token)
    if caller is None:
        raise ApiError(401, "unauthorized", "the token is unknown or revoked")
    g.tenant = caller.tenant
    g.operator = caller.operator


def require_operator(operators: tuple[str, ...]) -> None:
    """Raise 403 unless the caller is an operator: an operator's token, or a token of an operator
    tenant (with auth off, every caller is)."""
    if not (g.operator or g.tenant in operators):
        raise ApiError(
            403,
            "operator_only",
            "only an operator's token (asynctask tokens create --operator) or a token of an operator "
            "tenant (ASYNCTASK_API_OPERATOR_TENANTS) may call this",
        )
