"""Settings shared by the client, the worker and the CLI, read from the environment."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from importlib.util import find_spec
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from asynctask.errors import InvalidSetting
from asynctask.storable import DEFAULT_TEXT_LIMIT, MIN_TEXT_LIMIT

#: Used when ASYNCTASK_DATABASE_URL is not set: a SQLite file in the working directory. With
#: no broker URL either, the jobs live there too: AsyncTask needs no server by default.
DEFAULT_DATABASE_URL = "sqlite:///asynctask.db"
#: URL schemes of the Redis broker; ``sqlite`` and ``postgresql`` URLs mean the SQL broker.
REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+sentinel")
#: Databases of the SQL broker and of tracking (SQLAlchemy dialects, each with an optional
#: ``+driver``); ``postgres://`` is taken for ``postgresql://``, as libpq takes it.
SQL_SCHEMES = ("sqlite", "postgresql")
#: The PostgreSQL driver AsyncTask depends on; another one named in a URL must be installed.
POSTGRESQL_DRIVER = "psycopg"
#: The URL schemes each kind of URL setting takes.
URL_KINDS = {"Redis": REDIS_SCHEMES, "database": SQL_SCHEMES, "broker": REDIS_SCHEMES + SQL_SCHEMES}


@dataclass(frozen=True)
class QueueSpec:
    """One ``-q name[,weight][,fifo]`` entry. Weight 0 means "no weight given". ``fair``: the
    queue's waiting jobs are served in turn by tenant (see ``asynctask.fairness``); ``fifo``
    keeps them strictly in push order."""

    name: str
    weight: int = 0
    fair: bool = True

    @classmethod
    def parse(cls, text: str) -> QueueSpec:
        name, *options = (part.strip() for part in text.split(","))
        if not name:
            raise ValueError(f"empty queue name in {text!r}")
        weight, fair = 0, True
        for option in options:
            if option.lower() == "fifo":
                fair = False
                continue
            try:
                weight = int(option) if option else 0
            except ValueError:
                raise ValueError(f"queue weight must be an integer in {text!r}") from None
            if weight < 0:
                raise ValueError(f"queue weight must not be negative in {text!r}")
        return cls(name, weight, fair)


@dataclass(frozen=True)
class Settings:
    """Everything a client or worker needs. Defaults are Sidekiq 6.4's where it has one."""

    #: Where the jobs live: ``redis://``, ``sqlite:///`` or ``postgresql://``. Empty: the
    #: Redis URL if one is set, else the tracking database (see ``broker``).
    broker_url: str = ""
    #: Redis, when it is the broker (ASYNCTASK_REDIS_URL, then REDIS_URL); empty for none.
    redis_url: str = ""
    #: Replicas every write to Redis waits for (WAIT) before it counts as done; 0: none. With
    #: one or more, a failover loses no job a push, acknowledgement or retry reported done.
    redis_min_replicas: int = 0
    #: Key prefix as redis-namespace writes it ("myapp" gives "myapp:queue:default"); empty for none.
    namespace: str = ""
    queues: tuple[QueueSpec, ...] = (QueueSpec("default"),)
    #: Queues served in strict push order instead of in turn by tenant, whichever worker
    #: serves them (ASYNCTASK_FIFO_QUEUES, comma-separated); ``name,fifo`` in ``queues``
    #: says the same for one worker's queue.
    fifo_queues: tuple[str, ...] = ()
    #: Processor threads per worker process.
    concurrency: int = 10
    #: Async jobs awaited at once on a worker process's event loop.
    async_concurrency: int = 100
    #: Seconds a TERM waits for busy jobs before they are pushed back to their queues.
    timeout: float = 25.0
    #: Replace the worker process (gracefully) once it ran this many jobs; 0: never.
    max_jobs: int = 0
    #: Replace the worker process (gracefully) once a job leaves it above this RSS, in MB; 0: never.
    max_memory_mb: int = 0
    #: Keep a worker process's job threads on one CPU while its jobs come in batches
    #: (``asynctask.worker.placement``).
    cpu_pinning: bool = True
    #: Seconds between heartbeats (Sidekiq 6.x: 5).
    heartbeat_interval: float = 5.0
    #: Seconds the process hash lives without a heartbeat; after that its in-flight jobs are recovered.
    process_ttl: int = 60
    #: Average seconds between scheduled/retry polls of the whole cluster (scaled by process count).
    scheduled_poll_interval: float = 5.0
    #: Max seconds one idle blocking fetch waits, so threads notice quiet/stop.
    fetch_timeout: float = 2.0
    max_retries: int = 25
    dead_max_jobs: int = 10_000
    #: Seconds a job stays in the dead set (180 days).
    dead_timeout: int = 180 * 24 * 3600
    #: Seconds between two checkpoints a running resumable job stores (each also reads its
    #: stop request and its task's cancellation): how late a stop may act, and how many
    #: iterations a killed worker may have to run again.
    checkpoint_interval: float = 1.0
    #: Largest payload accepted, in bytes: bigger ones are refused at push and buried by the worker.
    max_payload_bytes: int = 1024 * 1024
    #: Seconds after a worker notices that Redis lost its data before it marks the tracked jobs
    #: that vanished ``lost``: what workers were doing when it happened settles first.
    lost_grace: float = 30.0
    #: Bytes (UTF-8) of one string tracking stores at most (an error, a log line, a string in
    #: params as shown): longer ones are cut, with a marker giving their size.
    tracked_text_limit: int = DEFAULT_TEXT_LIMIT
    tag: str = ""
    labels: tuple[str, ...] = field(default_factory=tuple)
    #: Modules to import at worker start (they register jobs), like Sidekiq's -r.
    require: tuple[str, ...] = field(default_factory=tuple)
    log_level: str = "WARNING"
    log_format: str = "logfmt"
    #: The tracking database (Task and Event rows): SQLite or PostgreSQL, as a SQLAlchemy URL.
    #: With a SQL broker it is the broker's database.
    database_url: str = DEFAULT_DATABASE_URL
    #: Whether a worker sends tracked jobs' transitions and applies them to the database.
    tracking: bool = True
    #: Where a worker applies transitions to SQL: "process" (a child process, the default),
    #: "thread" (in the worker), or "off" (another process runs ``asynctask flusher``).
    flusher: str = "process"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Settings from ASYNCTASK_* variables (REDIS_URL as a fallback), then ``overrides``."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        redis_variable = "ASYNCTASK_REDIS_URL" if env.get("ASYNCTASK_REDIS_URL") else "REDIS_URL"
        for name, variable, kind in (
            ("redis_url", redis_variable, "Redis"),
            ("broker_url", "ASYNCTASK_BROKER_URL", "broker"),
            ("database_url", "ASYNCTASK_DATABASE_URL", "database"),
        ):
            url = env.get(variable)
            if url:
                # Checked here, where the variable that holds it is known, unless an override
                # replaces it.
                if overrides.get(name) is None:
                    check_url(variable, url, kind)
                values[name] = url
        if "ASYNCTASK_NAMESPACE" in env:
            values["namespace"] = env["ASYNCTASK_NAMESPACE"]
        if env.get("ASYNCTASK_TRACKING"):
            values["tracking"] = parse_bool("ASYNCTASK_TRACKING", env["ASYNCTASK_TRACKING"])
        if env.get("ASYNCTASK_CPU_PINNING"):
            values["cpu_pinning"] = parse_bool("ASYNCTASK_CPU_PINNING", env["ASYNCTASK_CPU_PINNING"])
        if env.get("ASYNCTASK_FLUSHER"):
            values["flusher"] = env["ASYNCTASK_FLUSHER"]
        if env.get("ASYNCTASK_REQUIRE"):
            values["require"] = tuple(m.strip() for m in env["ASYNCTASK_REQUIRE"].split(",") if m.strip())
        if env.get("ASYNCTASK_QUEUES"):
            values["queues"] = tuple(QueueSpec.parse(q) for q in env["ASYNCTASK_QUEUES"].split(";"))
        if env.get("ASYNCTASK_FIFO_QUEUES"):
            names = env["ASYNCTASK_FIFO_QUEUES"].split(",")
            values["fifo_queues"] = tuple(q.strip() for q in names if q.strip())
        values.update(
            env_values(
                env,
                "ASYNCTASK_",
                {
                    "concurrency": int,
                    "async_concurrency": int,
                    "timeout": float,
                    "max_jobs": int,
                    "max_memory_mb": int,
                    "heartbeat_interval": float,
                    "process_ttl": int,
                    "scheduled_poll_interval": float,
                    "max_retries": int,
                    "max_payload_bytes": int,
                    "redis_min_replicas": int,
                    "tracked_text_limit": int,
                    "checkpoint_interval": float,
                    "lost_grace": float,
                    "tag": str,
                    "log_level": str,
                    "log_format": str,
                },
            )
        )
        values.update({k: v for k, v in overrides.items() if v is not None})
        return replace(cls(), **values).validated()

    def __post_init__(self) -> None:
        if self.redis_url:
            check_url("redis_url", self.redis_url, "Redis")
        if self.broker_url:
            check_url("broker_url", self.broker_url, "broker")
        check_url("database_url", self.database_url, "database")
        # A SQL broker keeps tracking in its own database, so that a job's state change and
        # its tracking write share one transaction.
        broker = self.broker
        if not is_redis_url(broker) and broker != self.database_url:
            if self.database_url != DEFAULT_DATABASE_URL:
                raise ValueError(
                    f"the SQL broker {broker!r} keeps tracking in its own database; "
                    f"ASYNCTASK_DATABASE_URL {self.database_url!r} must be the same URL or unset"
                )
            object.__setattr__(self, "database_url", broker)

    @property
    def flusher_starts_with_worker(self) -> bool:
        """Whether a worker's flusher process starts with it, and checks the tracking database
        itself: the worker applies through one and was given a database (the default one may
        never be used)."""
        return self.flusher == "process" and self.tracking and self.database_url != DEFAULT_DATABASE_URL

    @property
    def broker(self) -> str:
        """The broker's URL: ``broker_url``, else ``redis_url``, else the tracking database."""
        return self.broker_url or self.redis_url or self.database_url

    @property
    def uses_redis(self) -> bool:
        return is_redis_url(self.broker)

    def validated(self) -> Settings:
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if self.async_concurrency < 1:
            raise ValueError("async_concurrency must be at least 1")
        if not self.queues:
            raise ValueError("at least one queue is needed")
        if self.timeout < 0:
            raise ValueError("timeout must not be negative")
        if self.max_jobs < 0 or self.max_memory_mb < 0:
            raise ValueError("max_jobs and max_memory_mb must not be negative (0: no bound)")
        if self.heartbeat_interval <= 0 or self.process_ttl <= self.heartbeat_interval:
            raise ValueError("process_ttl must be longer than heartbeat_interval, and both positive")
        if not self.checkpoint_interval > 0:
            raise ValueError("checkpoint_interval must be positive")
        if self.lost_grace < 0:
            raise ValueError("lost_grace must not be negative")
        if self.tracked_text_limit < MIN_TEXT_LIMIT:
            raise ValueError(f"tracked_text_limit must be at least {MIN_TEXT_LIMIT} bytes")
        if self.redis_min_replicas < 0:
            raise ValueError("redis_min_replicas must not be negative")
        if self.redis_min_replicas and not self.uses_redis:
            raise ValueError("redis_min_replicas applies to a Redis broker; this one is SQL")
        if self.flusher not in ("process", "thread", "off"):
            raise ValueError("flusher must be 'process', 'thread' or 'off'")
        if self.log_format not in ("logfmt", "json"):
            raise ValueError("log_format must be 'logfmt' or 'json'")
        return self

    @property
    def served_queues(self) -> tuple[QueueSpec, ...]:
        """``queues`` with the queues of ``fifo_queues`` served in push order."""
        return tuple(replace(q, fair=False) if q.name in self.fifo_queues else q for q in self.queues)

    def is_fair(self, queue: str) -> bool:
        """Whether ``queue`` is served in turn by share, as these settings say."""
        return queue not in self.fifo_queues and all(q.fair for q in self.queues if q.name == queue)

    @property
    def strict_queues(self) -> bool:
        """Sidekiq's rule: with no weight given anywhere, queues are checked in the order listed."""
        return all(q.weight == 0 for q in self.queues)


def is_redis_url(url: str) -> bool:
    return url.partition("://")[0].lower() in REDIS_SCHEMES


def check_url(setting: str, url: str, kind: str) -> None:
    """Raise ``InvalidSetting`` naming ``setting`` unless ``url`` is a URL of ``kind`` (a key of
    ``URL_KINDS``): one of its schemes and ``://``, a SQL one maybe with a ``+driver``, which
    must then be installed.

    Read by eye, not parsed: checking a command line loads neither SQLAlchemy nor redis-py; and a
    mistyped Redis URL is not a database URL that SQLAlchemy then fails to parse."""
    schemes = URL_KINDS[kind]
    scheme, separator, _ = url.partition("://")
    scheme = scheme.lower()
    dialect, _, driver = scheme.partition("+")
    if scheme == "postgres":
        dialect = "postgresql"
    name = dialect if dialect in SQL_SCHEMES else scheme
    if separator and name in schemes:
        if dialect == "postgresql" and driver not in ("", POSTGRESQL_DRIVER) and not _installed(driver):
            raise InvalidSetting(
                f"{setting} uses the {driver} driver, which is not installed; use postgresql:// "
                f"(psycopg 3, installed) or install {driver}",
                setting=setting,
            )
        return
    *others, last = (f"{name}://" for name in schemes)
    found = f"it starts with {scheme}://" if separator and scheme else "it has no scheme://"
    # Not the URL itself: one that does not parse may still hold a password.
    raise InvalidSetting(
        f"{setting} is not a {kind} URL: it must start with {', '.join(others)} or {last} ({found})",
        setting=setting,
    )


def _installed(module: str) -> bool:
    return module.isidentifier() and find_spec(module) is not None


def env_values(
    env: Mapping[str, str], prefix: str, conversions: Mapping[str, Callable[[str], Any]]
) -> dict[str, Any]:
    """``{field: converted value}`` for each ``prefix + FIELD`` variable set and not empty."""
    values: dict[str, Any] = {}
    for name, convert in conversions.items():
        variable = f"{prefix}{name.upper()}"
        raw = env.get(variable)
        if raw:
            try:
                values[name] = convert(raw)
            except ValueError:
                kind = getattr(convert, "__name__", "value")
                raise ValueError(f"{variable}={raw!r} is not a valid {kind}") from None
    return values


def parse_bool(name: str, raw: str) -> bool:
    """An environment switch: true/false, 1/0, yes/no or on/off."""
    lowered = raw.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{name}={raw!r} is not a boolean (use true or false)")


def shown_url(url: str) -> str:
    """``url`` as it may be logged: with its password, if any, masked."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
