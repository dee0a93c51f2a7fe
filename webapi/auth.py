"""Bearer tokens: each request's token names its tenant (``g.tenant``).

A verified token is remembered for ``token_cache_seconds`` so that a status poll costs no
extra query; unknown tokens are never remembered, so guessing cannot fill the memory.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from flask import g, request
from sqlalchemy import Connection

from asynctask import tokens
from webapi.errors import ApiError

#: Entries kept before the cache starts over (tokens are few; this only bounds the worst case).
CACHE_LIMIT = 10_000


class TokenVerifier:
    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._lock = threading.Lock()
        self._known: dict[str, tuple[str, float]] = {}

    def tenant(self, connection: Connection, token: str) -> str | None:
        now = time.monotonic()
        with self._lock:
            cached = self._known.get(token)
        if cached is not None and cached[1] > now:
            return cached[0]
        tenant = tokens.tenant_for(connection, token)
        if tenant is not None and self.ttl > 0:
            with self._lock:
                if len(self._known) >= CACHE_LIMIT:
                    self._known.clear()
                self._known[token] = (tenant, now + self.ttl)
        return tenant


def authenticate(enabled: bool, verifier: TokenVerifier, connection: Callable[[], Connection]) -> None:
    """Set ``g.tenant`` from the Authorization header, or raise 401 (None when auth is off)."""
    if not enabled:
        g.tenant = None
        return
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise ApiError(401, "unauthorized", "send the header Authorization: Bearer <token>")
    tenant = verifier.tenant(connection(), token)
    if tenant is None:
        raise ApiError(401, "unauthorized", "the token is unknown or revoked")
    g.tenant = tenant


def require_operator(enabled: bool, operators: tuple[str, ...]) -> None:
    """Raise 403 unless the caller's tenant is an operator (with auth off, every caller is)."""
    if enabled and g.tenant not in operators:
        raise ApiError(
            403,
            "operator_only",
            "only a token of an operator tenant may call this (ASYNCTASK_API_OPERATOR_TENANTS)",
        )
