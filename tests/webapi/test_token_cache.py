"""The verified-token cache: a status poll costs no token query, and a revoked token stops
working within ``token_cache_seconds`` (the other API tests turn the cache off)."""

from __future__ import annotations

from collections.abc import Callable

from asynctask.tokens import create_token, revoke_token
from tests.conftest import wait_until
from tests.webapi.conftest import Api

#: Short enough to wait out, long enough to see a revoked token still accepted from the cache.
CACHE_SECONDS = 1.0


def test_a_revoked_token_stops_working_within_the_cache_time(make_api: Callable[..., Api]) -> None:
    api = make_api(token_cache_seconds=CACHE_SECONDS)
    made = create_token(api.engine, "acme")
    assert api.get("/api/tasks", made.token).status_code == 200
    revoke_token(api.engine, made.id)
    # Within the cache time, plus a margin for the requests themselves.
    wait_until(lambda: api.get("/api/tasks", made.token).status_code == 401, timeout=CACHE_SECONDS + 0.9)
    assert api.get("/api/tasks", made.token).get_json()["error"]["code"] == "unauthorized"
    # Revoking one token leaves the tenant's other tokens working.
    assert api.get("/api/tasks", api.acme).status_code == 200


def test_a_verified_token_is_served_from_the_cache(make_api: Callable[..., Api]) -> None:
    api = make_api(token_cache_seconds=60.0)
    made = create_token(api.engine, "acme")
    assert api.get("/api/tasks", made.token).status_code == 200
    revoke_token(api.engine, made.id)
    # Remembered: the token is not looked up again within the cache time.
    assert api.get("/api/tasks", made.token).status_code == 200
    # A token never verified is looked up, and refused, at once.
    fresh = create_token(api.engine, "acme")
    revoke_token(api.engine, fresh.id)
    assert api.get("/api/tasks", fresh.token).status_code == 401
