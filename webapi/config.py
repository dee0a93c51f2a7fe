"""The API's settings: ``ASYNCTASK_API_*`` variables on top of the shared ``Settings``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from asynctask.settings import Settings, env_values, parse_bool

MIB = 1024 * 1024
MAX_JSON_DEPTH = 500
MIN_SECRET_KEY_LENGTH = 32


@dataclass(frozen=True)
class ApiConfig:
    #: Redis, namespace, database URL and modules to load: shared with the worker.
    settings: Settings = field(default_factory=Settings)
    #: False only for local development: every request then acts as the tenant-less caller.
    auth: bool = True
    #: Origins allowed to call the API from a browser on another origin ("*" for any).
    cors_origins: tuple[str, ...] = ()
    #: Tenants whose tokens may read what is the deployment's, not a tenant's (the periodic
    #: schedules); no tenant by default.
    operator_tenants: tuple[str, ...] = ()
    max_body_bytes: int = 64 * MIB
    max_items: int = 200_000
    max_chunk_size: int = 1000
    #: Nesting of arrays and objects in a JSON body or NDJSON line (the body itself is level 1).
    max_json_depth: int = 32
    #: Longest JSON text of one item, NDJSON line, CSV record or ``meta``: a body is parsed one
    #: item at a time, so this bounds the memory an item parse can take.
    max_item_bytes: int = MIB
    #: Seconds between the stream's looks at a watched task.
    stream_interval: float = 0.5
    #: Progress streams one server process holds open at once: each holds a thread, and the
    #: other threads stay free for ordinary requests (``serve`` lowers it to fit its threads).
    max_streams: int = 24
    #: Progress streams one tenant holds open at once in one server process.
    max_tenant_streams: int = 8
    #: Threads serving requests in one process (``asynctask api --threads``): its database pool
    #: holds one connection per thread, and a few for its own background readers.
    threads: int = 32
    #: Seconds a request waits for a database connection before a 503 (``database_busy``).
    pool_timeout: float = 5.0
    #: Seconds after which a stream ends (a client reconnects), so none is held forever.
    stream_max_seconds: float = 300.0
    #: Seconds a verified token is trusted before it is looked up again (a revocation takes
    #: effect within this time); 0 looks it up on every request.
    token_cache_seconds: float = 5.0
    #: Seconds a task's first errors may be reused by status reads while its failed and
    #: error counts stay the same; 0 reads them every time.
    errors_cache_seconds: float = 1.0
    #: Signs the dashboard's session cookie. None: ``asynctask api`` makes one per start, shared
    #: by its worker processes (a restart then logs everyone out); ``create_app`` alone makes
    #: one per app, which does not work behind several processes of another WSGI server.
    secret_key: str | None = None
    #: Hours a dashboard login lasts.
    session_hours: float = 12.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> ApiConfig:
        env = os.environ if env is None else env
        values: dict[str, Any] = {"settings": Settings.from_env(env)}
        if env.get("ASYNCTASK_API_AUTH"):
            values["auth"] = parse_bool("ASYNCTASK_API_AUTH", env["ASYNCTASK_API_AUTH"])
        if env.get("ASYNCTASK_API_CORS_ORIGINS"):
            values["cors_origins"] = _names(env["ASYNCTASK_API_CORS_ORIGINS"])
        if env.get("ASYNCTASK_API_SECRET_KEY"):
            values["secret_key"] = env["ASYNCTASK_API_SECRET_KEY"]
        if env.get("ASYNCTASK_API_OPERATOR_TENANTS"):
            values["operator_tenants"] = _names(env["ASYNCTASK_API_OPERATOR_TENANTS"])
        values.update(
            env_values(
                env,
                "ASYNCTASK_API_",
                {
                    "max_body_bytes": int,
                    "max_items": int,
                    "max_chunk_size": int,
                    "max_json_depth": int,
                    "max_item_bytes": int,
                    "stream_interval": float,
                    "pool_timeout": float,
                    "max_streams": int,
                    "max_tenant_streams": int,
                    "stream_max_seconds": float,
                    "token_cache_seconds": float,
                    "errors_cache_seconds": float,
                    "session_hours": float,
                },
            )
        )
        values.update(overrides)
        return replace(cls(), **values).validated()

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> ApiConfig:
        """``create_app({...})``: keys are field names; anything not given comes from the environment."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(config) - known)
        if unknown:
            raise ValueError(f"unknown API setting(s): {', '.join(unknown)}")
        return cls.from_env(**config)

    def validated(self) -> ApiConfig:
        for name in ("max_body_bytes", "max_items", "max_chunk_size", "max_json_depth", "max_item_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.max_json_depth > MAX_JSON_DEPTH:
            # Python's JSON decoder stops at its recursion limit, around a thousand levels.
            raise ValueError(f"max_json_depth may be at most {MAX_JSON_DEPTH}")
        if self.max_streams < 0 or self.max_tenant_streams < 0:
            raise ValueError("max_streams and max_tenant_streams must not be negative")
        if self.stream_interval <= 0 or self.stream_max_seconds <= 0:
            raise ValueError("stream_interval and stream_max_seconds must be positive")
        if "null" in self.cors_origins:
            # Sandboxed frames and file: pages all send "Origin: null": allowing it allows any of them.
            raise ValueError('"null" cannot be an allowed CORS origin')
        if self.token_cache_seconds < 0 or self.errors_cache_seconds < 0:
            raise ValueError("token_cache_seconds and errors_cache_seconds must not be negative")
        if self.session_hours <= 0:
            raise ValueError("session_hours must be positive")
        if self.secret_key is not None and len(self.secret_key) < MIN_SECRET_KEY_LENGTH:
            # A short key can be guessed offline from one signed cookie.
            raise ValueError(f"secret_key must be at least {MIN_SECRET_KEY_LENGTH} characters")
        if isinstance(self.operator_tenants, str):
            # A tenant is looked up with "in": in one string, any part of it would be an operator.
            raise ValueError("operator_tenants must be a sequence of tenant names, not one string")
        return self


def _names(value: str) -> tuple[str, ...]:
    """A comma-separated list, its names stripped, empty ones dropped."""
    return tuple(name.strip() for name in value.split(",") if name.strip())
