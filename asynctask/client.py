"""The client: validates jobs, runs the client middleware, pushes them to the broker."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import redis

from asynctask import payload
from asynctask.brokers import Broker, open_broker
from asynctask.brokers.redis import RedisBroker
from asynctask.job import JobDefinition
from asynctask.keys import Keys
from asynctask.middleware import Chain, client_chain
from asynctask.registry import Registry, default_registry
from asynctask.settings import Settings
from asynctask.tracking import outbox

_SIDEKIQ_DEFAULTS: payload.JobDict = {"retry": True, "queue": "default"}


class Client:
    """Pushes jobs. Thread-safe; one per process is enough.

    ``push`` takes a Sidekiq item: ``{"class": "HardJob", "args": [1, 2], "queue": ..., "at": ...}``.
    A class registered in this process contributes its options as defaults, as in Sidekiq;
    any other class name (a Ruby worker, say) gets Sidekiq's defaults.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        connection: Any = None,
        middleware: Chain[payload.JobDict] | None = None,
        registry: Registry | None = None,
    ) -> None:
        """``connection``: a Redis client or SQLAlchemy engine for the broker to use (the
        caller closes it); by default the broker opens its own from the settings."""
        self.settings = settings or Settings.from_env()
        self.broker: Broker = open_broker(self.settings, connection)
        self.middleware = client_chain if middleware is None else middleware
        self.registry = default_registry if registry is None else registry

    def close(self) -> None:
        """Close the broker's connections, if the client opened them."""
        self.broker.close()

    @property
    def redis(self) -> redis.Redis:
        """The Redis connection of a Redis broker, for Sidekiq-level inspection."""
        return self._redis_broker().redis

    @property
    def keys(self) -> Keys:
        """The Redis key names of a Redis broker."""
        return self._redis_broker().keys

    def _redis_broker(self) -> RedisBroker:
        if not isinstance(self.broker, RedisBroker):
            raise AttributeError(f"the broker at {self.settings.broker!r} is not Redis")
        return self.broker

    def push(self, item: Mapping[str, Any]) -> str | None:
        """Enqueue one job; return its jid, or None if a client middleware dropped it."""
        job, at = self._normalize(item, payload.check_args(item.get("args")))
        _check_header(job)
        with outbox.collect() as transitions:
            pushed = self._through_middleware(job)
        if pushed is None:
            return None
        self.broker.push([(pushed, at)], transitions=transitions)
        return str(pushed["jid"])

    def push_bulk(self, item: Mapping[str, Any], batch_size: int = 1000) -> list[str | None]:
        """Enqueue one job per entry of ``item["args"]`` (a list of arg lists).

        ``item["at"]`` may be one timestamp or one per job. Each ``batch_size`` jobs cost one
        pipelined round trip. Returns the jids in order (None where middleware dropped a job).
        """
        all_args = item.get("args")
        if not isinstance(all_args, list) or not all(isinstance(a, list) for a in all_args):
            raise TypeError("push_bulk needs 'args' as a list of argument lists")
        for args in all_args:
            payload.check_args(args)
        at = item.get("at")
        if isinstance(at, list) and len(at) != len(all_args):
            raise ValueError("push_bulk 'at' must have one timestamp per job")
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        # Every job of the call shares one normalized, checked header (and created_at), as in
        # Sidekiq; each copy gets its own args and jid, in the header's key positions.
        shared = {k: v for k, v in item.items() if k not in ("at", "jid")}
        template, _ = self._normalize(shared, [], item.get("created_at", payload.now()))
        _check_header(template)
        jids: list[str | None] = []
        for start in range(0, len(all_args), batch_size):
            entries: list[tuple[payload.JobDict, float | None]] = []
            with outbox.collect() as transitions:
                for index in range(start, min(start + batch_size, len(all_args))):
                    job = dict(template)
                    job["args"] = all_args[index]
                    job["jid"] = payload.new_jid()
                    when = _run_at(at[index] if isinstance(at, list) else at)
                    pushed = self._through_middleware(job)
                    jids.append(None if pushed is None else str(pushed["jid"]))
                    if pushed is not None:
                        entries.append((pushed, when))
            if entries:
                self.broker.push(entries, transitions=transitions)
        return jids

    def _through_middleware(self, job: payload.JobDict) -> payload.JobDict | None:
        return self.middleware.invoke(job, job["queue"], final=lambda: job)

    def _normalize(
        self, item: Mapping[str, Any], args: list[Any], created_at: float | None = None
    ) -> tuple[payload.JobDict, float | None]:
        """Sidekiq's ``normalize_item``: defaults first, then the caller's keys, then jid and created_at."""
        if not isinstance(item, Mapping):
            raise TypeError(f"a job item must be a mapping, got {type(item).__name__}")
        name = item.get("class")
        if isinstance(name, JobDefinition):
            name = name.name
        if not isinstance(name, str) or not name:
            raise TypeError("a job item needs 'class': a non-empty job name")
        defaults = (
            self.registry.get(name).options.payload_head() if name in self.registry else _SIDEKIQ_DEFAULTS
        )
        job: payload.JobDict = {**defaults, **item, "class": name, "args": args}
        at = _run_at(job.pop("at", None))
        if not isinstance(job["queue"], str) or not job["queue"]:
            raise TypeError("'queue' must be a non-empty string")
        retry = job.get("retry")
        if not isinstance(retry, bool | int):
            raise TypeError(f"'retry' must be true, false or an integer, got {retry!r}")
        if "jid" not in job:
            job["jid"] = payload.new_jid()
        elif not isinstance(job["jid"], str) or not job["jid"]:
            raise TypeError("'jid' must be a non-empty string")
        if "created_at" not in job:
            job["created_at"] = created_at if created_at is not None else payload.now()
        return job, at


def _run_at(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"'at' must be an epoch timestamp in seconds, got {value!r}")
    return float(value)


def _check_header(job: payload.JobDict) -> None:
    """Every key but args (checked on their own) must be JSON-native too."""
    payload.check_args([{k: v for k, v in job.items() if k != "args"}])


_default_lock = threading.Lock()
_default: Client | None = None


def default_client() -> Client:
    """The client ``perform_async`` uses: configured by ``configure()`` or from the environment."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Client()
        return _default


def configure(settings: Settings | None = None, **kwargs: Any) -> Client:
    """Set the default client, from ``settings`` or ``Client(**kwargs)`` arguments."""
    global _default
    client = Client(settings, **kwargs)
    with _default_lock:
        _default = client
    return client
